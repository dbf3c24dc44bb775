"""What the Docker launcher asks of the engine besides the containers themselves: the image (present or pulled,
a registry's rate limit waited out), a user name's ids inside the image, the job's network with a fixed subnet;
and what the containers' final states mean (:func:`job_result`)."""

from __future__ import annotations

import dataclasses

from typing import Any, Mapping

from docker.errors import APIError, ImageNotFound
from docker.types import IPAMConfig, IPAMPool
from tenacity import Retrying, retry_if_result, stop_before_delay, wait_exponential

from operators.launch.base import (
    IMAGE_ERROR,
    OOM,
    PLATFORM_ERROR,
    TIMEOUT,
    LaunchRequest,
    LaunchResult,
    LineCallback,
    describe_exit,
    exit_failure_class,
    is_rate_limited,
    is_runtime_exit_code,
)
from operators.launch.docker.containers import job_addresses, job_labels
from operators.launch.names import resource_name
from operators.launch.outcome import read_failure_reason

NETWORK_TRIES = 5


def ensure_image(client, image: str, grace_seconds: float, on_line: LineCallback) -> LaunchResult | None:
    """The image on the engine: present, or pulled (see :func:`pull`)."""
    try:
        client.inspect_image(image)
        return None
    except ImageNotFound:
        on_line(f"[docker] pulling {image}")
        return pull(client, image, grace_seconds, on_line)
    except APIError as err:
        if err.status_code == 400:  # an invalid reference
            return image_failure(image, str(err.explanation or err))
        raise


def pull(client, image: str, grace_seconds: float, on_line: LineCallback) -> LaunchResult | None:
    """Pull the image; wait out a registry rate limit for a while (tenacity: doubling waits up to a minute, no attempt
    past the grace), fail fast on anything definite."""
    def pull_once() -> str | None:
        """None when pulled, else the registry's error."""
        try:
            for message in client.pull(image, stream=True, decode=True):
                if isinstance(message, dict) and message.get("error"):
                    return str(message["error"])
        except APIError as err:
            return str(err.explanation or err)
        return None

    said: list[bool] = []

    def say_once(state) -> None:
        if not said:
            said.append(True)
            on_line(f"[docker] the registry refuses to serve {image} for now ({state.outcome.result()}); retrying "
                    f"for up to {int(grace_seconds)} s")

    error = Retrying(
        retry=retry_if_result(lambda error: error is not None and is_rate_limited(error)),
        wait=wait_exponential(min=1, max=60), stop=stop_before_delay(grace_seconds), before_sleep=say_once,
        retry_error_callback=lambda state: state.outcome.result(),  # the last answer, not a RetryError
    )(pull_once)
    if error is None:
        return None
    if not is_rate_limited(error):  # not found, denied, invalid: retrying will not help
        return image_failure(image, error)
    return image_failure(image, f"still rate-limited after {int(grace_seconds)} s: {error}")


def image_failure(image: str, error: str) -> LaunchResult:
    return LaunchResult(
        succeeded=False,
        failure_class=IMAGE_ERROR,
        failure_reason=f"cannot pull image {image}: {error}; check image_uri, the registry and its login "
        "(the docker connection)",
    )


def ids_in_image(client, image: str, user: str) -> tuple[int, int]:
    """uid and gid of a user name, as the image's /etc/passwd has them (one short container)."""
    config = {"Image": image, "Entrypoint": ["sh", "-c", "id -u; id -g"], "Cmd": [], "User": user,
              "NetworkDisabled": True, "HostConfig": {"CapDrop": ["ALL"]}}
    created = client.create_container_from_config(config, None)
    try:
        client.start(created["Id"])
        code = client.wait(created["Id"], timeout=60).get("StatusCode")
        output = client.logs(created["Id"], stdout=True, stderr=True).decode(errors="replace").split()
    finally:
        client.remove_container(created["Id"], force=True, v=True)
    if code != 0 or len(output) < 2 or not all(part.isdigit() for part in output[:2]):
        raise ValueError(f"user {user!r} does not exist in image {image}; set the docker option user to a uid:gid")
    return int(output[0]), int(output[1])


def create_job_network(client, request: LaunchRequest) -> list[str]:
    """The job's network with a fixed subnet, and each host's address in it.

    The engine only accepts fixed container addresses on a network whose subnet was given explicitly, and we
    want the subnet it would pick (free, clear of the host's routes): so create it once without one, read
    the subnet, and create it again with that subnet. Another network taking the subnet in between only costs
    a retry.
    """
    network, labels = resource_name(request.job_name), job_labels(request)
    for attempt in range(NETWORK_TRIES):
        probe = client.create_network(network, driver="bridge", labels=labels, check_duplicate=True)
        pool = (client.inspect_network(probe["Id"]).get("IPAM", {}).get("Config") or [{}])[0]
        client.remove_network(probe["Id"])
        subnet, gateway = pool.get("Subnet"), pool.get("Gateway")
        if not subnet:
            raise RuntimeError(f"the engine gave the network {network} no subnet; cannot give hosts fixed addresses")
        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=subnet, gateway=gateway)])
        try:
            client.create_network(network, driver="bridge", labels=labels, check_duplicate=True, ipam=ipam)
        except APIError as err:
            if attempt + 1 < NETWORK_TRIES and "overlap" in str(err.explanation or err).lower():
                continue  # taken in between
            raise
        return job_addresses(subnet, gateway, request.instance_count)
    raise RuntimeError(f"could not create the network {network}")  # not reached


def job_result(request: LaunchRequest, states: Mapping[str, Mapping[str, Any]], timed_out: bool,
               restarts: Mapping[str, int] | None = None) -> LaunchResult:
    """What the containers' final states mean for the job; `restarts`: an elastic job's hosts started again."""
    result = _verdict(request, states, timed_out)
    return dataclasses.replace(result, restarts=dict(restarts)) if restarts else result


def _verdict(request: LaunchRequest, states: Mapping[str, Mapping[str, Any]], timed_out: bool) -> LaunchResult:
    if timed_out:
        return LaunchResult(
            succeeded=False,
            failure_class=TIMEOUT,
            failure_reason=f"the job ran longer than max_run_seconds ({request.max_run_seconds}) and was stopped",
        )
    removed = sorted(name for name, state in states.items() if state.get("Status") == "removed")
    if removed:
        return LaunchResult(
            succeeded=False,
            failure_class=PLATFORM_ERROR,
            failure_reason=f"container(s) {', '.join(removed)} were removed while the job ran (killed or "
            "removed by hand); retry to start again",
        )
    failed = [(name, state) for name, state in states.items() if state.get("ExitCode") or state.get("OOMKilled")]
    if not failed:
        return LaunchResult(succeeded=True, exit_code=0)
    for name, state in failed:
        if state.get("OOMKilled"):
            return LaunchResult(
                succeeded=False,
                exit_code=state.get("ExitCode"),
                failure_class=OOM,
                failure_reason=f"{name} ran out of memory (OOMKilled); "
                "raise resources.memory or lower the batch size",
            )
    # The runtime's own codes name the cause; 137/143 are the hosts we stopped after it.
    failed.sort(key=lambda item: (not is_runtime_exit_code(item[1]["ExitCode"]), item[1].get("FinishedAt", "")))
    name, state = failed[0]
    code = state["ExitCode"]
    message = f"{describe_exit(code)} on {name}, exit code {code}"
    reason = read_failure_reason(request.job_root) if is_runtime_exit_code(code) else None
    return LaunchResult(
        succeeded=False,
        exit_code=code,
        failure_class=exit_failure_class(code),
        failure_reason=f"{message}: {reason}" if reason else message,
    )

"""What the Docker launcher asks of the engine besides the containers themselves: the image (present or pulled,
a registry's rate limit waited out), a user name's ids inside the image, the job's network with a fixed subnet;
and what the containers' final states mean (:func:`job_result`)."""

from __future__ import annotations

import dataclasses
import io
import tarfile
from typing import Any, Mapping

from docker.errors import APIError, ImageNotFound, NotFound
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
    image_mismatch,
    is_rate_limited,
    is_runtime_exit_code,
    same_image,
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


def pinned_image(client, image: str, expected: str | None) -> LaunchResult | None:
    """A run pinned to an image digest (a reproduction) refuses another image (its id is not the pinned one), before
    any container exists; None when it is that image or the run is not pinned."""
    if not expected:
        return None
    actual = client.inspect_image(image).get("Id")
    if same_image(actual, expected):
        return None
    return LaunchResult(succeeded=False, failure_class=IMAGE_ERROR, failure_reason=image_mismatch(image, actual, expected))


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
    """uid and gid of `user` (name or uid, then optionally :group) as the image's /etc/passwd and /etc/group have
    them, by the engine's rules (a uid the image does not list: gid 0). The files are copied out of a container that
    is created and never started: resolving a name runs none of the image's code, which would run as whatever the
    name is (uid 0, before the launcher can refuse it)."""
    name, _, group = user.partition(":")
    created = client.create_container_from_config(
        {"Image": image, "Entrypoint": ["/nonexistent"], "Cmd": [], "NetworkDisabled": True}, None)
    try:
        users = _entries(_image_file(client, created["Id"], "/etc/passwd", image), 4)
        groups = _entries(_image_file(client, created["Id"], "/etc/group", image), 3) if group else []
    finally:
        client.remove_container(created["Id"], force=True, v=True)
    entry = _find(users, name, 2)
    if entry is None and not name.isdigit():
        raise ValueError(f"user {name!r} does not exist in image {image}; set the docker option user to a uid:gid")
    uid = int(entry[2]) if entry is not None else int(name)
    if not group:
        return uid, int(entry[3]) if entry is not None else 0
    found = _find(groups, group, 2)
    if found is None and not group.isdigit():
        raise ValueError(f"group {group!r} does not exist in image {image}; set the docker option user to a uid:gid")
    return uid, int(found[2]) if found is not None else int(group)


MAX_ACCOUNT_FILE = 4 * 2**20  # an image's /etc/passwd or /etc/group larger than this is not read


def _image_file(client, container: str, path: str, image: str) -> str:
    """A regular file of a (never started) container's image; "" when it is missing or not a regular file."""
    try:
        stream, _ = client.get_archive(container, path)
    except NotFound:
        return ""
    archive = bytearray()
    for chunk in stream:
        archive += chunk
        if len(archive) > MAX_ACCOUNT_FILE + 64 * 1024:
            raise ValueError(f"{path} in image {image} is larger than {MAX_ACCOUNT_FILE} bytes; set the docker option "
                             "user to a uid:gid")
    with tarfile.open(fileobj=io.BytesIO(bytes(archive))) as tar:
        member = tar.next()
        if member is None or not member.isfile():
            return ""
        return tar.extractfile(member).read().decode("utf-8", "replace")


def _entries(text: str, numeric_fields: int) -> list[list[str]]:
    """The lines of a passwd (name:x:uid:gid:...) or group (name:x:gid:...) file whose ids are numbers."""
    entries = []
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= numeric_fields and all(f.isdigit() for f in fields[2:numeric_fields]):
            entries.append(fields)
    return entries


def _find(entries: list[list[str]], wanted: str, id_field: int) -> list[str] | None:
    """The entry named `wanted`, else the first whose id it is (the engine's order)."""
    return next((e for e in entries if e[0] == wanted), None) or next(
        (e for e in entries if wanted.isdigit() and int(e[id_field]) == int(wanted)), None)


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

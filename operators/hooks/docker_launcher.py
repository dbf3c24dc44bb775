"""Launch backend `docker`: one container per host on a user-defined network named after the job.

Through the docker provider's DockerHook (its docker.APIClient: connection `[training.docker]
docker_conn_id` for registry login, engine at `[training.docker] docker_url`). Host i is the container
`<name>-<i>` (name = kube_name(job_name), the same deterministic name as on Kubernetes); containers on
a user-defined bridge network resolve each other by name, so those names are the hosts in
resourceconfig.json, and each container runs `train --root <layout root> --current-host <its name>`.
The job root is bind-mounted read-write at the layout's root, each cache entry read-only at
input/data/<channel>.

Written here rather than with the provider's DockerOperator: that runs one container and has no notion
of several hosts on one network, reattaching by name, or failure classes. The container bodies are
built by a pure function (:func:`container_configs`, the Engine API's POST /containers/create body).

Lifecycle (blocking; not deferrable: the engine is local to the worker, there is nothing to
hand to a triggerer): network and containers are looked up by their labels first; a try finding all of
its containers running or finished successfully reattaches (no second set); containers of a failed
earlier try are removed and created afresh. Logs are followed per container with timestamps and caught
up at the end after the last timestamp seen. When one host fails, the others are stopped (distributed
peers would otherwise hang). Failure classes come from the container state: OOMKilled, exit codes 1-3
(user), 4 (platform), a missing/invalid image (fail fast) vs a registry rate limit (retried for
`image_pull_grace_seconds`), max_run_seconds (stopped -> timeout). Containers and the network are
removed at the end unless options.keep_containers, and by stop() (on_kill).

Credentials: Docker has no Secret objects, so a literal credential in env is refused (same rule as on
Kubernetes); give the engine's host the access it needs (instance profile, mounted credentials file).
"""

from __future__ import annotations

import os
import re
import threading
import time
from functools import cached_property
from typing import Any, Iterable, Mapping

from airflow.providers.common.compat.sdk import BaseHook

from operators.backend_options import DOCKER_OPTION_KEYS as OPTION_KEYS
from operators.backend_options import KUBERNETES_OPTION_KEYS
from operators.container_env import CHANNEL_NAME, RESERVED_ENV, container_path, layout_root, looks_like_secret
from operators.hooks.launcher import (
    DEFAULT_MASTER_PORT,
    IMAGE_ERROR,
    OOM,
    PLATFORM_ERROR,
    TIMEOUT,
    Capabilities,
    LaunchRequest,
    LaunchResult,
    LineCallback,
    describe_exit,
    exit_failure_class,
    is_rate_limited,
    is_runtime_exit_code,
)
from operators.hooks.log_stream import LogCursor, deliver_line
from operators.hooks.outcome import clear_outcome_markers, read_failure_reason
from operators.job_names import JOB_LABEL, ORIGINAL_NAME_ANNOTATION
from operators.job_names import resource_name as kube_name

INDEX_LABEL = "airflow-training-jobs/host-index"
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3, "": 1}


def quantity(value: Any, field_name: str) -> float:
    """A Kubernetes quantity ('16Gi', '500m', 2) as a number, so one spec serves both backends."""
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([KMGTPE]i|[kMGTPEm]?)\s*$", str(value))
    if isinstance(value, bool) or not match:
        raise ValueError(f"resources.{field_name} is {value!r}; write e.g. cpu: 2 or '500m', memory: '8Gi'")
    number, suffix = float(match.group(1)), match.group(2)
    return number * (_BINARY.get(suffix) or _DECIMAL[suffix])


def container_name(job_name: str, index: int) -> str:
    return f"{kube_name(job_name)}-{index}"


def job_labels(request: LaunchRequest, index: int | None = None) -> dict[str, str]:
    labels = {JOB_LABEL: kube_name(request.job_name), ORIGINAL_NAME_ANNOTATION: request.job_name}
    if index is not None:
        labels[INDEX_LABEL] = str(index)
    return labels


def _bind_source(path: str, request: LaunchRequest, host_workspace: str | None, what: str) -> str:
    """Where the engine finds `path`: the worker's path, or the same place under host_workspace."""
    workspace = os.path.normpath(request.workspace)
    path = os.path.normpath(path)
    if not host_workspace:
        return path
    relative = os.path.relpath(path, workspace)
    if relative.startswith(".."):
        raise ValueError(f"{what} {path} is not inside the workspace {workspace}; keep job roots and the cache in it")
    return os.path.join(host_workspace, relative)


def container_configs(
    request: LaunchRequest,
    *,
    image: str,
    user: str,
    shm_size: str | None = "1Gi",
    host_workspace: str | None = None,
) -> list[dict[str, Any]]:
    """The Engine API body (POST /containers/create) of each host's container, in host order."""
    if not image:
        raise ValueError("image_uri is empty; set the spec's image_uri or [training] default_image")
    if request.instance_count < 1:
        raise ValueError(f"instance_count is {request.instance_count}; give at least 1 host")
    root = layout_root(request.layout)
    env = []
    for key, value in request.env.items():
        if key in RESERVED_ENV:
            raise ValueError(f"env {key} is set by the launcher for each host; remove it from the job's env")
        if looks_like_secret(key, str(value)):
            raise ValueError(
                f"env {key} looks like a credential, and the docker backend puts no literal credentials into "
                "containers; give the Docker host the access instead, or use the kubernetes backend's secret_env"
            )
        env.append(f"{key}={container_path(str(value), request.job_root, root)}")
    binds = [f"{_bind_source(request.job_root, request, host_workspace, 'job root')}:{root}:rw"]
    for channel, entry in sorted(request.channel_entries.items()):
        if not CHANNEL_NAME.match(channel):
            raise ValueError(f"channel name {channel!r} is not [A-Za-z0-9_-]+; rename the input channel")
        source = _bind_source(entry, request, host_workspace, f"cache entry of channel {channel!r}")
        binds.append(f"{source}:{root}/input/data/{channel}:ro")
    resources = request.resources
    unknown = sorted(set(resources) - {"cpu", "memory", "gpu"})
    if unknown:
        raise ValueError(f"resources.{unknown[0]} is not a resource; use cpu, memory and gpu")
    host_config: dict[str, Any] = {
        "Binds": binds,
        "NetworkMode": kube_name(request.job_name),
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges:true"],
        "Init": True,  # reaps the training's zombie processes and forwards SIGTERM
    }
    if resources.get("cpu"):
        host_config["NanoCpus"] = int(quantity(resources["cpu"], "cpu") * 1e9)
    if resources.get("memory"):
        host_config["Memory"] = int(quantity(resources["memory"], "memory"))
    gpus = resources.get("gpu") or 0
    if isinstance(gpus, bool) or not str(gpus).isdigit():
        raise ValueError(f"resources.gpu is {gpus!r}; give a whole number of GPUs per host")
    if int(gpus) > 0:
        host_config["DeviceRequests"] = [{"Driver": "", "Count": int(gpus), "Capabilities": [["gpu"]]}]
    if shm_size:
        host_config["ShmSize"] = int(quantity(shm_size, "shm_size"))
    configs = []
    network = kube_name(request.job_name)
    for index in range(request.instance_count):
        name = container_name(request.job_name, index)
        configs.append(
            {
                "name": name,
                "Image": image,
                "Cmd": ["train", "--root", root, "--current-host", name],  # the image's ENTRYPOINT stays
                "Hostname": name,
                "User": user,
                "Env": [f"TRAINING_ROOT={root}", *env],
                "Labels": job_labels(request, index),
                "Tty": False,
                "HostConfig": dict(host_config),
                "NetworkingConfig": {"EndpointsConfig": {network: {"Aliases": [name]}}},
            }
        )
    return configs


class _Follower(threading.Thread):
    """Follows one container's log into on_line, remembering the last timestamp passed on."""

    def __init__(self, client: Any, container: str, host: str | None, on_line: LineCallback):
        super().__init__(name=f"logs-{container}", daemon=True)
        self.client, self.container, self.host, self.on_line = client, container, host, on_line
        self.cursor = [0, 0]
        self.lock = threading.Lock()
        self.stream: Any = None
        self.stopped = False

    def run(self) -> None:
        try:
            since = self.cursor[0] / 1e9 - 1 if self.cursor[0] else None
            self.stream = self.client.logs(self.container, stream=True, follow=True, timestamps=True, since=since)
            cursor, buffer = LogCursor(self.cursor), b""
            for chunk in self.stream:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                with self.lock:
                    for raw in lines:
                        deliver_line(raw, cursor, self.on_line, self.host)
        except Exception:  # the stream was closed by stop(), or the container went away
            pass

    def stop(self) -> None:
        self.stopped = True
        stream = self.stream
        if stream is not None:
            try:
                stream.close()
            except Exception:
                pass

    def catch_up(self) -> None:
        """The lines after the cursor (a follow stream may close before the last ones)."""
        with self.lock:
            since = self.cursor[0] / 1e9 - 1 if self.cursor[0] else None
            data = self.client.logs(self.container, stream=False, timestamps=True, since=since)
            cursor = LogCursor(self.cursor)
            for raw in data.split(b"\n"):
                if raw:
                    deliver_line(raw, cursor, self.on_line, self.host)


class DockerLauncherHook(BaseHook):
    """Runs a LaunchRequest as containers on a Docker engine; see the module docstring."""

    backend = "docker"
    # Blocking only: the engine is local to the worker, there is nothing to hand to a triggerer. Cache entries
    # are bind-mounted read-only at input/data/<channel>.
    capabilities = Capabilities(deferrable=False, mounts_channels=True)

    def __init__(
        self, docker_url: str | None = None, docker_conn_id: str | None = None, default_image: str | None = None
    ):
        super().__init__()
        self._docker_url = docker_url
        self._docker_conn_id = docker_conn_id
        self._default_image = default_image

    # ---- configuration --------------------------------------------------------------------------------
    @cached_property
    def client(self):
        from airflow.providers.docker.hooks.docker import DockerHook

        url, conn_id = self._docker_url, self._docker_conn_id
        if url is None or conn_id is None:
            from operators.settings import docker_settings

            settings = docker_settings()
            url = url or settings.docker_url
            conn_id = conn_id if conn_id is not None else settings.docker_conn_id
        return DockerHook(docker_conn_id=conn_id or None, base_url=url, version="auto").get_conn()

    def _options(self, request: LaunchRequest) -> dict[str, Any]:
        options = dict(request.options or {})
        # The same spec may carry Kubernetes options; they do not apply here (not an error).
        unknown = sorted(set(options) - set(OPTION_KEYS) - set(KUBERNETES_OPTION_KEYS))
        if unknown:
            known = ", ".join(OPTION_KEYS)
            raise ValueError(f"docker option '{unknown[0]}' is not a known option; use one of: {known}")
        return {
            "user": str(options.get("user") or f"{os.getuid()}:{os.getgid()}"),
            "shm_size": options.get("shm_size", "1Gi") or None,
            "keep_containers": bool(options.get("keep_containers", False)),
            "host_workspace": options.get("host_workspace") or None,
            "image_pull_grace_seconds": float(options.get("image_pull_grace_seconds", 600)),
            "poll_interval": float(options.get("poll_interval", 1.0)),
            "stop_timeout": int(options.get("stop_timeout", 10)),
        }

    def image(self, request: LaunchRequest) -> str:
        if request.image_uri or self._default_image:
            return request.image_uri or self._default_image
        from operators.settings import training_settings

        return training_settings().default_image

    def configs(self, request: LaunchRequest) -> list[dict[str, Any]]:
        options = self._options(request)
        return container_configs(
            request,
            image=self.image(request),
            user=options["user"],
            shm_size=options["shm_size"],
            host_workspace=options["host_workspace"],
        )

    # ---- the protocol ---------------------------------------------------------------------------------
    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        return [container_name(job_name, index) for index in range(instance_count)]

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str] | None:
        return None  # the job's network resolves container names

    def master_port(self) -> int:
        return DEFAULT_MASTER_PORT  # every container has its own network namespace: no collisions

    def run(self, request: LaunchRequest, on_line: LineCallback) -> LaunchResult:
        expected = self.hosts(request.job_name, request.instance_count)
        if request.hosts and list(request.hosts) != expected:
            raise ValueError(
                f"the job's hosts {list(request.hosts)} are not this backend's host names {expected}; "
                "write resourceconfig.json with the launcher's hosts(job_name, instance_count)"
            )
        options = self._options(request)
        configs = self.configs(request)
        started_at = time.monotonic()
        failure = self._start(request, configs, options, on_line)
        if failure is not None:
            self._cleanup(request, options)
            return failure
        names = [config["name"] for config in configs]
        multi = request.instance_count > 1
        followers = {name: _Follower(self.client, name, name if multi else None, on_line) for name in names}
        for follower in followers.values():
            follower.start()
        states, timed_out = self._wait(request, names, options, started_at, on_line)
        for follower in followers.values():
            follower.join(timeout=2)
            follower.stop()
            follower.join(timeout=2)
            try:
                follower.catch_up()
            except Exception as err:
                self.log.warning("Could not read the rest of the log of %s: %s", follower.container, err)
        result = self._result(request, states, timed_out)
        if result.succeeded:
            on_line(f"[docker] job {kube_name(request.job_name)} completed on {request.instance_count} host(s)")
        self._cleanup(request, options)
        return result

    def stop(self, request: LaunchRequest) -> None:
        """on_kill: remove the job's containers and network; what is already gone is fine."""
        self._remove_all(request)

    # ---- steps ----------------------------------------------------------------------------------------
    def _start(
        self, request: LaunchRequest, configs: list[dict], options: Mapping[str, Any], on_line: LineCallback
    ) -> LaunchResult | None:
        from docker.errors import APIError

        client = self.client
        network = kube_name(request.job_name)
        existing = self._containers(request)
        if existing:
            states = {name: self._inspect(name)["State"] for name in existing}
            exited_badly = any(
                state.get("Status") == "exited" and (state.get("ExitCode") or state.get("OOMKilled"))
                for state in states.values()
            )
            if len(existing) == len(configs) and not exited_badly:
                summary = ", ".join(f"{name} {state.get('Status')}" for name, state in sorted(states.items()))
                on_line(f"[docker] reattaching to the containers of job {network} ({summary}): no second set")
                self._start_created(existing)
                return None
            on_line(f"[docker] removing the containers of an earlier, failed try of job {network}")
            self._remove_all(request, keep_network=True)
        clear_outcome_markers(request.job_root)
        try:
            client.create_network(network, driver="bridge", labels=job_labels(request), check_duplicate=True)
        except APIError as err:
            if err.status_code != 409:
                raise
        for config in configs:
            body = {k: v for k, v in config.items() if k != "name"}
            failure = self._create(config["name"], body, options, on_line)
            if failure is not None:
                return failure
        self._start_created(self._containers(request))
        on_line(f"[docker] started job {network}: {', '.join(c['name'] for c in configs)}, image {configs[0]['Image']}")
        return None

    def _create(self, name: str, body: dict, options: Mapping[str, Any], on_line: LineCallback) -> LaunchResult | None:
        from docker.errors import APIError, ImageNotFound

        client = self.client
        pulled = False
        while True:
            try:
                client.create_container_from_config(body, name)
                return None
            except ImageNotFound:
                if pulled:
                    raise
                failure = self._pull(body["Image"], options, on_line)
                if failure is not None:
                    return failure
                pulled = True
            except APIError as err:
                if err.status_code == 409:  # created meanwhile (a concurrent try): reattach to it
                    return None
                if err.status_code == 400 and "invalid reference format" in str(err.explanation):
                    return self._image_failure(body["Image"], str(err.explanation))
                raise

    def _pull(self, image: str, options: Mapping[str, Any], on_line: LineCallback) -> LaunchResult | None:
        """Pull the image; wait out a registry rate limit for a while, fail fast on anything definite."""
        from docker.errors import APIError

        deadline = time.monotonic() + options["image_pull_grace_seconds"]
        delay = 1.0
        said = False
        while True:
            error = None
            try:
                for message in self.client.pull(image, stream=True, decode=True):
                    if isinstance(message, dict) and message.get("error"):
                        error = str(message["error"])
                        break
            except APIError as err:
                error = str(err.explanation or err)
            if error is None:
                return None
            if not is_rate_limited(error):  # not found, denied, invalid: retrying will not help
                return self._image_failure(image, error)
            if time.monotonic() >= deadline:
                grace = int(options["image_pull_grace_seconds"])
                return self._image_failure(image, f"still rate-limited after {grace} s: {error}")
            if not said:
                on_line(
                    f"[docker] the registry refuses to serve {image} for now ({error}); retrying for up to "
                    f"{int(options['image_pull_grace_seconds'])} s"
                )
                said = True
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 60)

    def _image_failure(self, image: str, error: str) -> LaunchResult:
        return LaunchResult(
            succeeded=False,
            failure_class=IMAGE_ERROR,
            failure_reason=f"cannot pull image {image}: {error}; check image_uri, the registry and its login "
            "(the docker connection)",
        )

    def _start_created(self, containers: Mapping[str, Mapping[str, Any]]) -> None:
        for name in containers:
            if self._inspect(name)["State"].get("Status") == "created":
                self.client.start(name)

    def _wait(
        self,
        request: LaunchRequest,
        names: list[str],
        options: Mapping[str, Any],
        started_at: float,
        on_line: LineCallback,
    ) -> tuple[dict[str, dict], bool]:
        """Until every container has exited, or one failed (then the others are stopped), or the deadline."""
        stopping = False
        while True:
            states = {name: self._inspect(name)["State"] for name in names}
            running = [name for name, state in states.items() if state.get("Running")]
            failed = [
                name
                for name, state in states.items()
                if not state.get("Running") and (state.get("ExitCode") or state.get("OOMKilled"))
            ]
            if not running:
                return states, False
            if failed and not stopping:
                on_line(f"[docker] {failed[0]} failed; stopping the other hosts")
                self._stop(running, options)
                stopping = True
                continue
            if request.max_run_seconds and time.monotonic() - started_at > request.max_run_seconds:
                on_line(f"[docker] max_run_seconds ({request.max_run_seconds}) reached; stopping the job")
                self._stop(running, options)
                return {name: self._inspect(name)["State"] for name in names}, True
            time.sleep(options["poll_interval"])

    def _stop(self, names: Iterable[str], options: Mapping[str, Any]) -> None:
        from docker.errors import NotFound

        for name in names:
            try:
                self.client.stop(name, timeout=options["stop_timeout"])
            except NotFound:
                pass

    def _result(self, request: LaunchRequest, states: Mapping[str, Mapping[str, Any]], timed_out: bool) -> LaunchResult:
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

    # ---- engine helpers -------------------------------------------------------------------------------
    def _inspect(self, name: str) -> dict[str, Any]:
        from docker.errors import NotFound

        try:
            return self.client.inspect_container(name)
        except NotFound:  # removed under us: stop() (on_kill) or by hand
            return {"State": {"Status": "removed", "Running": False, "ExitCode": None, "OOMKilled": False}}

    def _containers(self, request: LaunchRequest) -> dict[str, dict[str, Any]]:
        found = self.client.containers(all=True, filters={"label": f"{JOB_LABEL}={kube_name(request.job_name)}"})
        return {c["Names"][0].lstrip("/"): c for c in found}

    def _cleanup(self, request: LaunchRequest, options: Mapping[str, Any]) -> None:
        if options["keep_containers"]:
            self.log.info("Keeping the containers of job %s (keep_containers)", request.job_name)
            return
        try:
            self._remove_all(request)
        except Exception as err:  # the result stands; leftovers are removed by the next try or stop()
            self.log.warning("Could not remove the containers of job %s: %s", request.job_name, err)

    def _remove_all(self, request: LaunchRequest, keep_network: bool = False) -> None:
        from docker.errors import NotFound

        for name in self._containers(request):
            try:
                self.client.remove_container(name, force=True)
            except NotFound:
                pass
        if keep_network:
            return
        network = kube_name(request.job_name)
        for net in self.client.networks(names=[network]):
            if net.get("Name") == network:
                try:
                    self.client.remove_network(net["Id"])
                except NotFound:
                    pass


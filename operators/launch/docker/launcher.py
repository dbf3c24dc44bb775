"""Launch backend `docker`: one container per host on a network named after the job, on the Docker engine next to
the worker (docs/docker.md).

Through the docker provider's DockerHook (its docker.APIClient: connection `[training.docker] docker_conn_id` for
registry login, engine at `[training.docker] docker_url`). What each container looks like is data
(operators/launch/docker/containers.py); who it runs as, the job root it may write and its credentials file are operators/launch/docker/access.py.
Written here rather than with the provider's DockerOperator: that runs one container and has no notion of several
hosts on one network, reattaching by name, or failure classes.

Hosts resolve each other reliably: the network is created with a fixed subnet (the one the engine would pick) and
every container gets a fixed address and all hosts in its /etc/hosts, so a name resolves before its container has
started and after it has exited; the runtime's bounded host wait is a second line of defence.

Lifecycle (blocking; not deferrable: the engine is local to the worker, there is nothing to hand to a triggerer):
network and containers are looked up by their labels first; a try finding all of its containers running or
finished successfully reattaches (no second set); containers of a failed earlier try are removed and created
afresh. Logs are followed per container with timestamps and caught up at the end after the last timestamp seen.
When one host fails, the others are stopped (distributed peers would otherwise hang); an elastic job's host that died
of anything but a user error or the time limit is started again instead (at most elastic max_restarts times each),
and torchrun in the others re-forms the group with it. Failure classes come from
the container state: OOMKilled or the runtime's exit 137 (oom_killed), exit codes 1-3 (user), 4 (platform), a
missing/invalid image (fail fast) vs a registry rate limit (retried for `image_pull_grace_seconds`),
max_run_seconds (stopped -> timeout). Containers, network and credentials file are removed at the end (containers
and network kept with options.keep_containers), and by stop() (on_kill). The result names the image id the containers
ran (image_digest); a request pinned to another (expected_image_digest) fails as an image error before any container.
"""

from __future__ import annotations

import dataclasses
import os
import time
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping

import psutil
from airflow.providers.common.compat.sdk import BaseHook
from airflow.providers.docker.hooks.docker import DockerHook
from docker.errors import APIError, ImageNotFound, NotFound

from operators.launch.docker.declaration import DECLARATION
from operators.launch.docker.options import OPTION_KEYS
from operators.launch.docker.users import root_part
from operators.launch import worker_slots
from operators.launch.base import (
    DEFAULT_MASTER_PORT,
    USER_ERROR,
    LaunchRequest,
    LaunchResult,
    LineCallback,
)
from operators.launch.docker import access
from operators.launch.docker import engine
from operators.launch.docker.containers import INDEX_LABEL, container_configs, container_name
from operators.launch.docker.elastic import restart_lost
from operators.launch.docker.logs import LogFollower
from operators.launch.names import JOB_LABEL
from operators.launch.names import resource_name
from operators.launch.outcome import clear_outcome_markers
from operators.launch.worker_slots import NotEnoughGpus
from operators.launch.docker.settings import docker_settings
from operators.settings import training_settings


def _root_image_user(image: str, user: str, why: str) -> str:
    return (f"image {image} runs as USER {user!r} ({why}): training containers never run with uid 0 or gid 0; "
            "set USER to a non-root uid:gid in the image or give the docker option user")


class DockerLauncherHook(BaseHook):
    """Runs a LaunchRequest as containers on a Docker engine; see the module docstring."""

    backend = "docker"
    # Blocking only: the engine is local to the worker, there is nothing to hand to a triggerer. Cache entries
    # are bind-mounted read-only at input/data/<channel>.
    capabilities = DECLARATION.capabilities  # operators/launch/docker/declaration.py

    def __init__(
        self, docker_url: str | None = None, docker_conn_id: str | None = None, default_image: str | None = None,
        pids_limit: int | None = None,
    ):
        super().__init__()
        self._docker_url = docker_url
        self._docker_conn_id = docker_conn_id
        self._default_image = default_image
        self._pids_limit = pids_limit
        self._gpus_leased = False
        self.restarts: dict[str, int] = {}  # elastic jobs: container -> times it was started again (_wait)

    # ---- configuration --------------------------------------------------------------------------------
    @property
    def engine_url(self) -> str:
        if self._docker_url is not None:
            return self._docker_url
        return docker_settings().docker_url

    @cached_property
    def client(self):
        conn_id = self._docker_conn_id
        if conn_id is None:
            conn_id = docker_settings().docker_conn_id
        return DockerHook(docker_conn_id=conn_id or None, base_url=self.engine_url, version="auto").get_conn()

    @property
    def pids_limit(self) -> int:
        """The most processes a training container may hold: as given, else `[training.docker] pids_limit`."""
        if self._pids_limit is not None:
            return self._pids_limit
        return docker_settings().pids_limit

    def _options(self, request: LaunchRequest) -> dict[str, Any]:
        options = dict(request.options or {})
        # Only the spec's docker section arrives here (JobSpec.backend_options); another backend's is not ours.
        unknown = sorted(set(options) - set(OPTION_KEYS))
        if unknown:
            known = ", ".join(OPTION_KEYS)
            raise ValueError(f"docker option '{unknown[0]}' is not a known option; use one of: {known}")
        user = str(options.get("user") or "").strip() or None
        if user and root_part(user):
            raise ValueError(f"docker option user is {user!r}: training containers never run as root; give a non-root "
                             "uid:gid, or leave it out to use the image's user")
        if options.get("host_workspace"):
            raise ValueError("docker option host_workspace is an admin setting: set [training.docker] host_workspace "
                             "in airflow.cfg, not in the job")
        return {
            "user": user,
            "secret_variables": options.get("secret_variables") or {},
            "shm_size": options.get("shm_size", "1Gi") or None,
            "keep_containers": bool(options.get("keep_containers", False)),
            "host_workspace": docker_settings().host_workspace or None,  # an admin setting, never a job option
            "image_pull_grace_seconds": float(options.get("image_pull_grace_seconds", 600)),
            "poll_interval": float(options.get("poll_interval", 1.0)),
            "stop_timeout": int(options.get("stop_timeout", 10)),
        }

    def image(self, request: LaunchRequest) -> str:
        if request.image_uri or self._default_image:
            return request.image_uri or self._default_image
        return training_settings().default_image

    def configs(
        self, request: LaunchRequest, user: str = access.DEFAULT_USER, addresses: list[str] | None = None,
        secrets_file: str | None = None, gpu_ids: list[list[str]] | None = None,
    ) -> list[dict[str, Any]]:
        options = self._options(request)
        return container_configs(
            request,
            image=self.image(request),
            user=user,
            shm_size=options["shm_size"],
            host_workspace=options["host_workspace"],
            addresses=addresses,
            secrets_file=secrets_file,
            pids_limit=self.pids_limit,
            gpu_ids=gpu_ids,
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
        # The docker option's Variables and the spec's references (resolved at launch): one read-only file.
        secrets = {**access.secret_values(options["secret_variables"]), **request.secret_env}
        started_at = time.monotonic()
        failure = self._start(request, options, secrets, on_line)
        if failure is not None:
            self._cleanup(request, options)
            return failure
        names = expected
        image_digest = self._image_ran(names[0])
        multi = request.instance_count > 1
        followers = {name: LogFollower(self.client, name, name if multi else None, on_line) for name in names}
        for follower in followers.values():
            follower.start()

        def follow_again(name: str) -> None:  # a restarted container's log, from where its last run's left off
            old = followers[name]
            old.stop()
            old.join(timeout=2)
            follower = LogFollower(self.client, name, name if multi else None, on_line)
            follower.cursor = old.cursor
            followers[name] = follower
            follower.start()

        states, timed_out = self._wait(request, names, options, started_at, on_line, follow_again)
        for follower in followers.values():
            follower.join(timeout=2)
            follower.stop()
            follower.join(timeout=2)
            try:
                follower.catch_up()
            except Exception as err:
                self.log.warning("Could not read the rest of the log of %s: %s", follower.container, err)
        result = dataclasses.replace(engine.job_result(request, states, timed_out, self.restarts),
                                     image_digest=image_digest)
        if result.succeeded:
            on_line(f"[docker] job {resource_name(request.job_name)} completed on {request.instance_count} host(s)")
        self._cleanup(request, options)
        return result

    def stop(self, request: LaunchRequest) -> None:
        """on_kill: remove the job's containers, network and credentials file; what is already gone is fine."""
        access.remove_secrets(access.secrets_dir(request.workspace, request.job_name))
        self._remove_all(request)

    # ---- steps ----------------------------------------------------------------------------------------
    def _start(
        self, request: LaunchRequest, options: Mapping[str, Any], secrets: Mapping[str, str], on_line: LineCallback
    ) -> LaunchResult | None:
        network = resource_name(request.job_name)
        existing = self._containers(request)
        if existing:
            states = {name: self._inspect(name)["State"] for name in existing}
            exited_badly = any(
                state.get("Status") == "exited" and (state.get("ExitCode") or state.get("OOMKilled"))
                for state in states.values()
            )
            if len(existing) == request.instance_count and not exited_badly:
                summary = ", ".join(f"{name} {state.get('Status')}" for name, state in sorted(states.items()))
                on_line(f"[docker] reattaching to the containers of job {network} ({summary}): no second set")
                self._start_created(request)
                self._lease_gpus(request)  # the earlier try's lease: the same GPUs
                self._record_gpu_holders(request)
                return None
            on_line(f"[docker] removing the containers of an earlier, failed try of job {network}")
            self._remove_all(request)
        clear_outcome_markers(request.job_root)
        image = self.image(request)
        failure = engine.ensure_image(self.client, image, options["image_pull_grace_seconds"], on_line)
        if failure is None:
            failure = engine.pinned_image(self.client, image, request.expected_image_digest)
        if failure is not None:
            return failure
        try:
            user, ids = self._run_as(request, options, image, on_line)
            gpu_ids = self._lease_gpus(request)
        except (ValueError, NotEnoughGpus) as err:  # the job's (or its image's) to fix: no retry can help
            return LaunchResult(succeeded=False, failure_class=USER_ERROR, failure_reason=str(err))
        secrets_file = None
        if secrets:
            directory = access.secrets_dir(request.workspace, request.job_name)
            secrets_file = access.write_secrets(directory, secrets, *ids)
            on_line(f"[docker] credentials {', '.join(sorted(secrets))} from Airflow Variables: in a read-only file, "
                    "not in the container's configuration")
        addresses = engine.create_job_network(self.client, request)
        configs = self.configs(request, user=user, addresses=addresses, secrets_file=secrets_file, gpu_ids=gpu_ids)
        for config in configs:
            body = {k: v for k, v in config.items() if k != "name"}
            failure = self._create(config["name"], body, options, on_line)
            if failure is not None:
                return failure
        self._start_created(request)
        self._record_gpu_holders(request)
        hosts = ", ".join(f"{c['name']} ({a})" for c, a in zip(configs, addresses))
        on_line(f"[docker] started job {network}: {hosts}, image {image}, user {user}")
        return None

    def _image_ran(self, name: str) -> str | None:
        """The image id a created container runs ("sha256:<hex>"): the one its tag named when it was created, whatever
        the tag names now. All of a job's containers are created from one image: host 0's is the job's."""
        return (self._inspect(name).get("Image") or "").strip() or None

    def _run_as(
        self, request: LaunchRequest, options: Mapping[str, Any], image: str, on_line: LineCallback
    ) -> tuple[str, tuple[int, int | None] | None]:
        """The container's user (see docker_access) and its numeric ids; gives it the job root when we are root.
        ValueError (one line naming the user and the image) when that user would run with uid 0 or gid 0."""
        user = options["user"]
        if not user and not access.worker_is_root():
            return f"{os.getuid()}:{os.getgid()}", (os.getuid(), os.getgid())
        from_image = not user
        if from_image:
            user = self._image_user(image, on_line)
        ids = access.numeric_ids(user)
        if ids is None or ids[1] is None:  # a name, or a uid alone: the image's passwd says which ids (gid 0 if none)
            ids = engine.ids_in_image(self.client, image, user)
        # Root by another name: a user of the image whose uid or primary group is 0.
        root = "uid 0" if ids[0] == 0 else "gid 0" if ids[1] == 0 else None
        if root and from_image:
            raise ValueError(_root_image_user(image, user, f"{root} in the image"))
        if root:
            raise ValueError(f"docker option user {user!r} is {root} in image {image}: training containers never run "
                             "as root (uid 0 or gid 0); give a non-root uid:gid")
        if access.worker_is_root():
            changed = access.give_job_root(request.job_root, *ids)
            if changed:
                self.log.info("Gave %d entries of the job root %s to %s", changed, request.job_root, user)
        return user, ids

    def _image_user(self, image: str, on_line: LineCallback) -> str:
        """The image's USER, judged like the docker option user. Root or unset (most images set none) runs as
        DEFAULT_USER instead; a non-root uid with group root is refused (ValueError): running it as another user
        than it names could break the image, and running it as named gives the job group root."""
        user = (self.client.inspect_image(image).get("Config") or {}).get("User") or ""
        if access.is_root(user):
            on_line(f"[docker] image {image} runs as root; running as {access.DEFAULT_USER} instead "
                    "(set the docker option user to choose)")
            return access.DEFAULT_USER
        if root_part(user):  # "1000:0", "1000:root", "1000:00", "1000:"
            raise ValueError(_root_image_user(image, user, "group root"))
        return user

    def _create(self, name: str, body: dict, options: Mapping[str, Any], on_line: LineCallback) -> LaunchResult | None:
        client = self.client
        pulled = False
        while True:
            try:
                client.create_container_from_config(body, name)
                return None
            except ImageNotFound:
                if pulled:
                    raise
                failure = engine.pull(client, body["Image"], options["image_pull_grace_seconds"], on_line)
                if failure is not None:
                    return failure
                pulled = True
            except APIError as err:
                if err.status_code == 409:  # created meanwhile (a concurrent try): reattach to it
                    return None
                if err.status_code == 400 and "invalid reference format" in str(err.explanation):
                    return engine.image_failure(body["Image"], str(err.explanation))
                raise

    def _start_created(self, request: LaunchRequest) -> None:
        """Start the job's containers not started yet, in host order."""
        containers = self._containers(request)
        for name in sorted(containers, key=lambda n: int(containers[n].get("Labels", {}).get(INDEX_LABEL, 0))):
            if self._inspect(name)["State"].get("Status") == "created":
                self.client.start(name)

    def _wait(
        self,
        request: LaunchRequest,
        names: list[str],
        options: Mapping[str, Any],
        started_at: float,
        on_line: LineCallback,
        on_restart: Callable[[str], None] | None = None,
    ) -> tuple[dict[str, dict], bool]:
        """Until every container has exited, or one failed (then the others are stopped), or the deadline. An elastic
        job's container that died of anything but a user error or the time limit is started again instead, at most
        elastic max_restarts times per host: torchrun in the others re-forms the group with it."""
        stopping = False
        restarts = self.restarts = {}
        while True:
            states = {name: self._inspect(name)["State"] for name in names}
            running = [name for name, state in states.items() if state.get("Running")]
            failed = [
                name
                for name, state in states.items()
                if not state.get("Running") and (state.get("ExitCode") or state.get("OOMKilled"))
            ]
            if failed and not stopping and restart_lost(self.client, request, failed, states, restarts, on_line,
                                                        on_restart):
                continue
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
        for name in names:
            try:
                self.client.stop(name, timeout=options["stop_timeout"])
            except NotFound:
                pass

    # ---- engine helpers -------------------------------------------------------------------------------
    def _inspect(self, name: str) -> dict[str, Any]:
        try:
            return self.client.inspect_container(name)
        except NotFound:  # removed under us: stop() (on_kill) or by hand
            return {"State": {"Status": "removed", "Running": False, "ExitCode": None, "OOMKilled": False}}

    def _containers(self, request: LaunchRequest) -> dict[str, dict[str, Any]]:
        found = self.client.containers(all=True, filters={"label": f"{JOB_LABEL}={resource_name(request.job_name)}"})
        return {c["Names"][0].lstrip("/"): c for c in found}

    def _lease_gpus(self, request: LaunchRequest) -> list[list[str]] | None:
        """Each host's GPUs, leased on the worker like the local backend's, when the engine is the worker's own
        (a unix socket) and the job asks for GPUs; None: the engine picks (a remote engine's GPUs are not ours)."""
        per_host = int(request.resources.get("gpu") or 0)
        if not per_host or not self.engine_url.startswith("unix://"):
            return None
        devices = worker_slots.gpu_devices(training_settings().local_gpu_devices)
        lease = worker_slots.claim(request.workspace, request.job_name, None, per_host * request.instance_count,
                                   devices)
        self._gpus_leased = True
        ids = [str(worker_slots.device_number(d)) for d in lease.gpus]
        return [ids[i * per_host:(i + 1) * per_host] for i in range(request.instance_count)]

    def _record_gpu_holders(self, request: LaunchRequest) -> None:
        """The containers' init processes hold the job's GPUs: a worker that dies leaves them the job's."""
        if not self._gpus_leased:
            return
        holders = []
        for name in self._containers(request):
            pid = (self._inspect(name).get("State") or {}).get("Pid")
            try:
                holders.append((pid, psutil.Process(pid).create_time()))
            except (psutil.Error, TypeError, ValueError):
                continue
        worker_slots.record_holders(request.workspace, request.job_name, holders)

    def _cleanup(self, request: LaunchRequest, options: Mapping[str, Any]) -> None:
        access.remove_secrets(access.secrets_dir(request.workspace, request.job_name))
        if self._gpus_leased:
            worker_slots.release(request.workspace, request.job_name)
        if options["keep_containers"]:
            self.log.info("Keeping the containers of job %s (keep_containers)", request.job_name)
            return
        try:
            self._remove_all(request)
        except Exception as err:  # the result stands; leftovers are removed by the next try or stop()
            self.log.warning("Could not remove the containers of job %s: %s", request.job_name, err)

    def _remove_all(self, request: LaunchRequest) -> None:
        for name in self._containers(request):
            try:
                self.client.remove_container(name, force=True, v=True)  # and its anonymous volumes
            except NotFound:
                pass
        network = resource_name(request.job_name)
        for net in self.client.networks(names=[network]):
            if net.get("Name") == network:
                try:
                    self.client.remove_network(net["Id"])
                except NotFound:
                    pass


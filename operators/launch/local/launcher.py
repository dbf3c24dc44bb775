"""Local backend (the embedded default): `train` as processes on the Airflow worker.

instance_count N = N `train` processes sharing one job root, each told its host with --current-host; every host name
maps to 127.0.0.1 through trainingjobconfig.json host_addresses, so the runtime's distributed environment (MASTER_ADDR,
TF_CONFIG, ...) is the real one. Each process starts its own session, so the whole tree (the sandbox, the runtime, the
user script and anything it spawned) is found with psutil and killed together (operators/launch/local/processes.py).

A training survives the death of the task process that launched it, so the task's retry reattaches instead of
training twice. What the launcher keeps for that is platform state, in the job's state directory outside the job root
(operators/state/job_state.py; user code can neither read nor forge it): the pids (launch-pids.json, in host order, checked
against the live processes before anything is signalled), each host's output (launch/<host>.log, opened by the
launcher and handed to the process) and exit status (launch/<host>.status, written by bubblewrap itself through
--json-status-fd; unsandboxed, train's --exit-file launch/<host>.exit): operators/launch/local/host_processes.py. A retry that finds every recorded process alive follows their logs and waits for
them; one that finds some dead kills the rest and starts again (one run per job_name keeps other runs out:
operators/state/lease.py).

While the training runs, operators/launch/local/supervision.py passes its lines on and stops what overruns or waits on
a failed peer; what its end means: operators/launch/local/job_result.py.
No training outlives its launcher for long: the launcher renews a lease (launch/lease, touched every few seconds,
bound read-only into the sandbox at LEASE_IN_SANDBOX) and `train` stops itself once it is older than [training]
local_lease_seconds (--lease); `train` also enforces --max-run-seconds itself. By default it runs in a bubblewrap
sandbox (operators/launch/local/sandbox.py) with an allowlisted environment, only its job root and channels visible, and a network
namespace of the job's own ([training] local_network, operators/launch/local/network.py); the sandbox's PID namespace ends with
`train`. Its processes get platform values alone; the job's variables: operators/launch/local/job_variables.py.
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from operators.launch.base import (
    PLATFORM_ERROR,
    USER_ERROR,
    LaunchRequest,
    LaunchResult,
    LineCallback,
)
from operators.launch.local.host_processes import (
    HostProcess,
    forget_hosts,
    record_hosts,
    recorded_processes,
    remove_logs,
)
from operators.launch.local.declaration import DECLARATION
from operators.launch.local.isolation import JobIsolation
from operators.launch.local.job_result import job_result, out_of_memory_reason
from operators.launch.local.job_variables import job_variables, job_variables_fd
from operators.launch.local.limits import LimitError
from operators.launch.local.output import MAX_QUEUED_LINES, follow_log
from operators.launch.local.network import NetworkUnavailable, join_command, open_namespace, start_slirp4netns
from operators.launch.local.network import check_available as check_network
from operators.launch.local.processes import kill_trees
from operators.launch.local.sandbox import (
    SandboxUnavailable,
    bwrap_command,
    check_available,
    runtime_path,
    user_environment,
)
from operators.launch.local.supervision import renew_lease, wait_for_hosts
from operators.launch.worker_slots import GPU_QUEUE, NotEnoughGpus
from operators.settings import TrainingSettings, training_settings
from operators.state.job_state import LAUNCH_DIR, LEASE, ensure_state_dir
from training_runtime.contract import JOB_VENV_ENV, ROOT_ENV

log = logging.getLogger(__name__)

LEASE_IN_SANDBOX = "/run/training/lease"  # where `train` finds the lease inside the sandbox (read-only)


class LocalLauncherHook:
    backend = "local"
    # Blocking only (the processes are the worker's); input/data/<channel> is a link into the cache.
    capabilities = DECLARATION.capabilities  # operators/launch/local/declaration.py

    def __init__(self, python: str | None = None, sandbox: str | None = None,
                 environment_names: tuple[str, ...] | None = None, lease_seconds: float | None = None,
                 network: str | None = None, settings=None):
        """settings: the TrainingSettings to read the rest from (uid range, limits, GPUs); airflow.cfg's when None and
        not every other argument is given, else the defaults (the SDK's local mode: no Airflow there)."""
        if settings is None:
            given = None not in (sandbox, environment_names, lease_seconds, network)
            settings = TrainingSettings(workspace="") if given else training_settings()
        sandbox = settings.local_sandbox if sandbox is None else sandbox
        environment_names = settings.local_environment if environment_names is None else environment_names
        lease_seconds = settings.local_lease_seconds if lease_seconds is None else lease_seconds
        network = settings.local_network if network is None else network
        self.python = python or sys.executable
        self.sandbox = sandbox
        self.environment_names = tuple(environment_names)
        self.lease_seconds = float(lease_seconds)
        self.network = network
        self.settings = settings
        self._isolation = JobIsolation(settings, sandboxed=sandbox == "bubblewrap")
        self._procs: list[subprocess.Popen] = []
        self._hosts: list[HostProcess] = []
        self._network_proc: subprocess.Popen | None = None

    # -- the launcher protocol -------------------------------------------------------------------------
    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        return DECLARATION.host_plan.hosts(job_name, instance_count)  # operators/launch/local/declaration.py

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str]:
        return DECLARATION.host_plan.host_addresses(job_name, instance_count)

    def master_port(self) -> int:
        return DECLARATION.host_plan.master_port()

    def queue_of(self, request: LaunchRequest) -> dict[str, str] | None:
        """A job asking for GPUs may wait for this worker's (operators/launch/worker_slots.py): the console shows it
        queued, its place read from the task log, until it has them."""
        return {"queue": GPU_QUEUE, "priority": ""} if int(request.resources.get("gpu") or 0) else None

    def stop(self, request: LaunchRequest) -> None:
        own = {p.pid for p in self._procs}
        roots = [p for p in recorded_processes(request) if p is not None and p.pid not in own]
        if roots or self._procs:
            killed = kill_trees(roots, children=self._procs)
            log.info("Stopped training %s: %d processes killed", request.job_name, killed)
        forget_hosts(request)

    def run(self, request: LaunchRequest, on_line: LineCallback) -> LaunchResult:
        recorded = recorded_processes(request)
        launch_dir = ensure_state_dir(request.workspace, request.job_name, LAUNCH_DIR)
        earlier = [HostProcess(host, launch_dir, process=process) for host, process in zip(request.hosts, recorded)]
        alive_ones = [h.process for h in earlier if h.running()]
        # Every host still running or ended on its own (its exit status written): that training is the one to follow.
        if recorded and len(recorded) == len(request.hosts) and all(
                h.running() or h.recorded_exit() is not None for h in earlier):
            self._hosts = earlier
            self._isolation.prepare(request, launch_dir, start=False)
            log.warning("Reattached to the training of %s that an earlier attempt started (pids %s, %d still "
                        "running): it is not started again; its output follows from the start", request.job_name,
                        [h.pid for h in earlier], len(alive_ones))
        else:
            if alive_ones and kill_trees(alive_ones):
                log.warning("Killed the rest of a training of %s an earlier attempt left half running",
                            request.job_name)
            try:
                if self.sandbox == "bubblewrap":
                    check_available(unshare_net=self.network != "host")
                    check_network(self.network)
                self._isolation.prepare(request, launch_dir)
                self._start(request, launch_dir)
            except (SandboxUnavailable, NetworkUnavailable, NotEnoughGpus, LimitError) as err:
                if self._procs:
                    kill_trees([], children=self._procs)
                    forget_hosts(request)
                self._isolation.release(request)
                spec_problem = isinstance(err, (NotEnoughGpus, LimitError))
                return LaunchResult(False, None, str(err), USER_ERROR if spec_problem else PLATFORM_ERROR)
        supervisor = os.getppid()  # the task SDK's supervisor: it reports our result and heartbeats the try
        lines: queue.Queue = queue.Queue(MAX_QUEUED_LINES)
        done = threading.Event()
        threading.Thread(target=renew_lease, args=(os.path.join(launch_dir, LEASE), self.lease_seconds, done),
                         daemon=True).start()
        multi = len(request.hosts) > 1
        for host in self._hosts:
            threading.Thread(target=follow_log, args=(host, f"[{host.name}] " if multi else "", lines),
                             daemon=True).start()
        try:
            return self._wait(request, lines, on_line)
        finally:
            done.set()
            if os.getppid() != supervisor:
                # Our supervisor died: nobody reports this result, the try fails by its missing heartbeat and the
                # retry must find the training (running or ended) to reattach to, not start it again.
                log.warning("The task's supervisor died: leaving the training of %s to the retry", request.job_name)
            else:
                if any(p.poll() is None for p in self._procs):
                    kill_trees([], children=self._procs)
                forget_hosts(request)
                remove_logs(self._hosts)
                self._isolation.release(request)
            if self._network_proc is not None:
                try:
                    self._network_proc.wait(10)  # exits with the last sandbox (its --exit-fd)
                except subprocess.TimeoutExpired:
                    pass

    # -- internals ------------------------------------------------------------------------------------
    def _environment(self, request: LaunchRequest) -> dict[str, str]:
        """Every started process's, privileged ones first: platform values alone (job_variables.py says why)."""
        # HOME is private: the worker's home (its ~/.aws, ~/.netrc, ...) is not the training's.
        home = "/tmp" if self.sandbox == "bubblewrap" else os.path.join(request.job_root, ".home")
        os.makedirs(home, exist_ok=True)
        return {**user_environment(os.environ, self.environment_names), **self._isolation.environment(), "HOME": home,
                "PYTHONPATH": runtime_path(), "PYTHONUNBUFFERED": "1", ROOT_ENV: request.job_root, JOB_VENV_ENV: "1"}

    def _command(self, request: LaunchRequest, host: HostProcess, lease: str, status_fd: int | None = None,
                 block_fd: int | None = None, own_network: bool = True, seccomp_fd: int | None = None,
                 variables_fd: int | None = None) -> list[str]:
        sandboxed = self.sandbox == "bubblewrap"
        cmd = [self.python, "-m", "training_runtime", "--root", request.job_root, "--current-host", host.name]
        if variables_fd is not None:
            cmd += ["--environment-fd", str(variables_fd)]
        if not sandboxed:
            cmd += ["--exit-file", host.exit_path]  # sandboxed, bubblewrap reports the exit code (status_fd)
        if self.lease_seconds:
            cmd += ["--lease", LEASE_IN_SANDBOX if sandboxed else lease, "--lease-seconds", f"{self.lease_seconds:g}"]
        if request.max_run_seconds:
            cmd += ["--max-run-seconds", str(request.max_run_seconds)]
        if not sandboxed:
            return cmd
        isolation = self._isolation
        return bwrap_command(cmd, request.job_root, readonly=sorted(set(request.channel_entries.values())),
                             hide=os.environ.get("AIRFLOW_HOME"), die_with_parent=False,
                             unshare_net=own_network and self.network != "host",
                             files_readonly={lease: LEASE_IN_SANDBOX, **isolation.accounts}, status_fd=status_fd,
                             block_fd=block_fd, run_as=isolation.run_as(), seccomp_fd=seccomp_fd,
                             gpus=isolation.slots.gpus)

    def _start(self, request: LaunchRequest, launch_dir: str) -> None:
        env = self._environment(request)
        lease = os.path.join(launch_dir, LEASE)
        Path(lease).touch()
        sandboxed = self.sandbox == "bubblewrap"
        shared = sandboxed and self.network != "host" and (len(request.hosts) > 1 or self.network == "slirp4netns")
        slirp = sandboxed and self.network == "slirp4netns"
        block_r, block_w = os.pipe() if slirp else (None, None)  # host 1 waits for its network to be configured
        exit_r, exit_w = os.pipe() if slirp else (None, None)  # slirp4netns ends once every sandbox closed it
        net_fd = user_fd = None
        try:
            for index, name in enumerate(request.hosts):
                host = HostProcess(name, launch_dir)
                for stale in (host.exit_path, host.status_path):
                    Path(stale).unlink(missing_ok=True)
                status_fd = os.open(host.status_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600) \
                    if sandboxed else None
                seccomp_fd = os.open(self._isolation.seccomp_path, os.O_RDONLY | os.O_CLOEXEC) \
                    if sandboxed and self._isolation.seccomp_path else None
                variables_fd = job_variables_fd(job_variables(request), launch_dir)
                first = index == 0
                cmd = self._command(request, host, lease, status_fd, block_r if first else None,
                                    own_network=first, seccomp_fd=seccomp_fd, variables_fd=variables_fd)
                if not first and net_fd is not None:
                    cmd = join_command(cmd, net_fd, user_fd)
                fds = tuple(fd for fd in (status_fd, seccomp_fd, variables_fd, block_r if first else None, exit_w,
                                          net_fd, user_fd) if fd is not None)
                try:
                    with open(host.log_path, "wb") as out:  # the process keeps its own descriptor
                        host.proc = subprocess.Popen(
                            cmd,
                            cwd=request.job_root,
                            env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            pass_fds=fds,
                            start_new_session=True,  # its own process group: killed as a tree, not by our signals
                            preexec_fn=self._isolation.preexec(name),  # into the host's cgroup before anything runs
                        )
                finally:
                    for fd in (status_fd, seccomp_fd, variables_fd):
                        if fd is not None:
                            os.close(fd)
                self._procs.append(host.proc)
                self._hosts.append(host)
                if first and shared:
                    net_fd, user_fd = open_namespace(host.status_path, lambda: host.proc.poll() is None)
                    if slirp:
                        self._network_proc = start_slirp4netns(net_fd, user_fd, exit_r, env)
                        os.write(block_w, b"1")
        finally:
            for fd in (block_r, block_w, exit_r, exit_w, net_fd, user_fd):
                if fd is not None:
                    os.close(fd)
            if self._hosts:
                self._record_pids(request)
        log.info("Started %d training process(es) for %s: pids %s", len(self._procs), request.job_name,
                 [p.pid for p in self._procs])

    def _wait(self, request: LaunchRequest, lines: queue.Queue, on_line: LineCallback) -> LaunchResult:
        codes, timed_out = wait_for_hosts(request, self._hosts, lines, on_line)
        return job_result(request, codes, timed_out, self._out_of_memory())

    def _out_of_memory(self) -> str | None:
        """Why the kernel's OOM killer struck in the job's cgroups (the limit it hit), else None."""
        if not self._isolation.oom_killed():
            return None
        limit = self._isolation.limits
        return out_of_memory_reason(limit.memory_bytes if limit else None)

    def _record_pids(self, request: LaunchRequest) -> None:
        self._isolation.record_holders(request, record_hosts(request, self._hosts))

"""Local backend (the embedded default): `train` as processes on the Airflow worker.

instance_count N = N `train` processes sharing one job root, each told its host with --current-host; every host name
maps to 127.0.0.1 through trainingjobconfig.json host_addresses, so the runtime's distributed environment (MASTER_ADDR,
TF_CONFIG, ...) is the real one. Each process starts its own session, so the whole tree (the runtime, the user script
and anything it spawned) is found with psutil and killed together.

A training survives the death of the task process that launched it, so the task's retry reattaches instead of
training twice: the pids are recorded in the job root (.launch-pids.json, in host order), each host's output goes to
.launch/<host>.log (read by whoever launched or reattached) and its exit code to .launch/<host>.exit (train writes
it: a reattached launcher cannot wait for a process that is not its child). A retry that finds every recorded
process alive follows their logs and waits for them; one that finds some dead kills the rest and starts again (one
run per job_name keeps other runs out: operators/job_lease.py).

No training outlives its launcher for long: the launcher renews a lease (.launch/lease, touched every few seconds)
and `train` stops itself once it is older than [training] local_lease_seconds (--lease); `train` also enforces
--max-run-seconds itself. By default it runs in a bubblewrap sandbox (local_sandbox.py) with an allowlisted
environment and only its job root and channels visible; the sandbox's PID namespace ends with `train`.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from operators.hooks.launcher import (
    PLATFORM_ERROR,
    TIMEOUT,
    USER_ERROR,
    Capabilities,
    LaunchRequest,
    LaunchResult,
    LineCallback,
    exit_failure_class,
)
from operators.hooks.local_sandbox import (
    SandboxUnavailable,
    bwrap_command,
    check_available,
    runtime_path,
    user_environment,
)
from operators.hooks.outcome import read_failure_reason

log = logging.getLogger(__name__)

PIDS_FILE = ".launch-pids.json"
LAUNCH_DIR = ".launch"  # per-host logs and exit codes, the lease
LEASE_FILE = "lease"
KILL_GRACE_SECONDS = 10.0
PEER_FAILURE_GRACE_SECONDS = 15.0
# `train` enforces max_run_seconds itself (SIGTERM, SIGKILL 10 s later); ours is the safety net behind it.
DEADLINE_SLACK_SECONDS = 30.0


def _process_tree(pid: int, create_time: float | None = None):
    import psutil

    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return []  # the pid was recycled: not ours
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def kill_trees(entries: list[tuple[int, float | None]], grace: float = KILL_GRACE_SECONDS,
               children: list[subprocess.Popen] = ()) -> int:
    """SIGTERM every process of the given trees, SIGKILL what is still alive after `grace` seconds.

    Our own children (`children`) are waited for through their Popen objects: reaping them here (psutil) would make
    Popen report exit code 0 for a process that was killed.
    """
    import psutil

    own = {p.pid for p in children}
    procs = [p for pid, ctime in entries for p in _process_tree(pid, ctime)]
    procs += [p for child in children if child.poll() is None for p in _process_tree(child.pid)]
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    others = [p for p in procs if p.pid not in own]
    _, alive = psutil.wait_procs(others, timeout=max(0.1, deadline - time.monotonic()))
    alive += [p for p in procs if p.pid in own and _running(p)]
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    for child in children:
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            pass
    psutil.wait_procs([p for p in alive if p.pid not in own], timeout=5)
    return len(procs)


def _running(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _alive(pid: int, create_time: float | None) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return False  # the pid was recycled: not ours
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _Host:
    """One `train` process: started by this launcher (proc set) or by an earlier attempt (reattached)."""

    def __init__(self, name: str, job_root: str, pid: int = 0, create_time: float | None = None,
                 proc: subprocess.Popen | None = None):
        self.name, self.pid, self.create_time, self.proc = name, pid, create_time, proc
        self.log_path = os.path.join(job_root, LAUNCH_DIR, f"{name}.log")
        self.exit_path = os.path.join(job_root, LAUNCH_DIR, f"{name}.exit")

    def running(self) -> bool:
        return self.proc.poll() is None if self.proc else _alive(self.pid, self.create_time)

    def returncode(self) -> int | None:
        if self.proc:
            return self.proc.poll()
        if self.running():
            return None
        try:
            return int(Path(self.exit_path).read_text().strip())
        except (OSError, ValueError):
            return -signal.SIGKILL  # gone without writing its exit code: killed


class LocalLauncherHook:
    backend = "local"
    # Blocking only (the processes are the worker's); input/data/<channel> is a link into the cache.
    capabilities = Capabilities(deferrable=False, mounts_channels=False)

    def __init__(self, python: str | None = None, sandbox: str | None = None,
                 environment_names: tuple[str, ...] | None = None, lease_seconds: float | None = None):
        if sandbox is None or environment_names is None or lease_seconds is None:
            from operators.settings import training_settings

            settings = training_settings()
            sandbox = settings.local_sandbox if sandbox is None else sandbox
            environment_names = settings.local_environment if environment_names is None else environment_names
            lease_seconds = settings.local_lease_seconds if lease_seconds is None else lease_seconds
        self.python = python or sys.executable
        self.sandbox = sandbox
        self.environment_names = tuple(environment_names)
        self.lease_seconds = float(lease_seconds)
        self._procs: list[subprocess.Popen] = []
        self._hosts: list[_Host] = []

    # -- the launcher protocol -------------------------------------------------------------------------
    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        return [f"algo-{i + 1}" for i in range(instance_count)]

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str]:
        return {host: "127.0.0.1" for host in self.hosts(job_name, instance_count)}

    def master_port(self) -> int:
        """A free port, so concurrent local jobs don't collide on 29500."""
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def stop(self, request: LaunchRequest) -> None:
        own = {p.pid for p in self._procs}
        entries = [e for e in self._recorded_pids(request.job_root) if e[0] not in own]
        if entries or self._procs:
            killed = kill_trees(entries, children=self._procs)
            log.info("Stopped training %s: %d processes killed", request.job_name, killed)
        self._forget_pids(request.job_root)

    def run(self, request: LaunchRequest, on_line: LineCallback) -> LaunchResult:
        leftovers = self._recorded_pids(request.job_root)
        earlier = [_Host(host, request.job_root, pid, ctime) for host, (pid, ctime) in zip(request.hosts, leftovers)]
        alive = [(h.pid, h.create_time) for h in earlier if h.running()]
        # Every host still running or ended on its own (its exit code written): that training is the one to follow.
        if leftovers and len(leftovers) == len(request.hosts) and all(
                h.running() or os.path.exists(h.exit_path) for h in earlier):
            self._hosts = earlier
            log.warning("Reattached to the training of %s that an earlier attempt started (pids %s, %d still "
                        "running): it is not started again; its output follows from the start", request.job_name,
                        [h.pid for h in earlier], len(alive))
        else:
            if alive and kill_trees(alive):
                log.warning("Killed the rest of a training of %s an earlier attempt left half running",
                            request.job_name)
            if self.sandbox == "bubblewrap":
                try:
                    check_available()
                except SandboxUnavailable as err:
                    return LaunchResult(False, None, str(err), PLATFORM_ERROR)
            self._start(request)
        supervisor = os.getppid()  # the task SDK's supervisor: it reports our result and heartbeats the try
        lines: queue.Queue = queue.Queue()
        done = threading.Event()
        threading.Thread(target=self._renew_lease, args=(request.job_root, done), daemon=True).start()
        multi = len(request.hosts) > 1
        for host in self._hosts:
            threading.Thread(target=self._follow, args=(host, f"[{host.name}] " if multi else "", lines),
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
                self._forget_pids(request.job_root)
                self._remove_logs()

    # -- internals ------------------------------------------------------------------------------------
    def _environment(self, request: LaunchRequest) -> dict[str, str]:
        # HOME is private: the worker's home (its ~/.aws, ~/.netrc, ...) is not the training's.
        home = "/tmp" if self.sandbox == "bubblewrap" else os.path.join(request.job_root, ".home")
        os.makedirs(home, exist_ok=True)
        return {**user_environment(os.environ, self.environment_names), "HOME": home, **request.env,
                **request.secret_env, "PYTHONPATH": runtime_path(), "PYTHONUNBUFFERED": "1", "TRAINING_ROOT": request.job_root,
                "TRAINING_JOB_VENV": "1"}

    def _command(self, request: LaunchRequest, host: _Host) -> list[str]:
        cmd = [self.python, "-m", "training_runtime", "--root", request.job_root, "--current-host", host.name,
               "--exit-file", host.exit_path]
        if self.lease_seconds:
            cmd += ["--lease", os.path.join(request.job_root, LAUNCH_DIR, LEASE_FILE),
                    "--lease-seconds", f"{self.lease_seconds:g}"]
        if request.max_run_seconds:
            cmd += ["--max-run-seconds", str(request.max_run_seconds)]
        if self.sandbox != "bubblewrap":
            return cmd
        return bwrap_command(cmd, request.job_root, readonly=sorted(set(request.channel_entries.values())),
                             hide=os.environ.get("AIRFLOW_HOME"), die_with_parent=False)

    def _start(self, request: LaunchRequest) -> None:
        env = self._environment(request)
        launch_dir = os.path.join(request.job_root, LAUNCH_DIR)
        os.makedirs(launch_dir, exist_ok=True)
        Path(launch_dir, LEASE_FILE).touch()
        for name in request.hosts:
            host = _Host(name, request.job_root)
            Path(host.exit_path).unlink(missing_ok=True)
            with open(host.log_path, "wb") as out:  # the process keeps its own descriptor
                host.proc = subprocess.Popen(
                    self._command(request, host),
                    cwd=request.job_root,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: killed as a tree, not by signals meant for us
                )
            host.pid = host.proc.pid
            self._procs.append(host.proc)
            self._hosts.append(host)
        self._record_pids(request.job_root)
        log.info("Started %d training process(es) for %s: pids %s", len(self._procs), request.job_name,
                 [p.pid for p in self._procs])

    def _renew_lease(self, job_root: str, done: threading.Event) -> None:
        """Touch the lease while we watch the training: `train` stops itself once nobody did for lease_seconds."""
        path = os.path.join(job_root, LAUNCH_DIR, LEASE_FILE)
        every = max(0.5, min(10.0, self.lease_seconds / 10)) if self.lease_seconds else 10.0
        while not done.wait(every):
            try:
                Path(path).touch()
            except OSError as err:
                log.warning("Cannot renew the training's lease %s: %s", path, err)

    @staticmethod
    def _follow(host: _Host, prefix: str, lines: queue.Queue) -> None:
        """Tail the host's log file until the process is gone and everything it wrote was read."""
        with open(host.log_path, "rb") as f:
            pending = b""
            while True:
                finished = not host.running()  # checked before reading: nothing it wrote can be missed
                chunk = f.read(65536)
                if chunk:
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for raw in complete:
                        lines.put(prefix + raw.decode("utf-8", "replace"))
                    continue
                if finished:
                    break
                time.sleep(0.1)
            if pending:
                lines.put(prefix + pending.decode("utf-8", "replace"))
        lines.put(None)

    def _wait(self, request: LaunchRequest, lines: queue.Queue, on_line: LineCallback) -> LaunchResult:
        deadline = (time.monotonic() + request.max_run_seconds + DEADLINE_SLACK_SECONDS
                    if request.max_run_seconds else None)
        open_streams = len(self._hosts)
        first_failure_at: float | None = None
        timed_out = False
        while open_streams or any(h.running() for h in self._hosts):
            try:
                line = lines.get(timeout=0.2)
                if line is None:
                    open_streams -= 1
                else:
                    on_line(line)
            except queue.Empty:
                pass
            now = time.monotonic()
            if deadline is not None and now > deadline and not timed_out:
                timed_out = True
                log.error("Training %s exceeded max_run_seconds=%s: stopping it", request.job_name,
                          request.max_run_seconds)
                self._kill([h for h in self._hosts if h.running()])
            failed = [h for h in self._hosts if h.returncode() not in (None, 0)]
            if failed and first_failure_at is None:
                first_failure_at = now
            if first_failure_at is not None and now - first_failure_at > PEER_FAILURE_GRACE_SECONDS:
                # A failed host leaves its peers waiting on collectives forever: stop them.
                running = [h for h in self._hosts if h.running()]
                if running:
                    log.error("A host of %s failed; stopping the %d still running", request.job_name, len(running))
                    self._kill(running)
        while True:  # lines queued after the last poll
            try:
                line = lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                on_line(line)
        return self._result(request, [h.returncode() for h in self._hosts], timed_out)

    @staticmethod
    def _kill(hosts: list[_Host]) -> None:
        kill_trees([(h.pid, h.create_time) for h in hosts if not h.proc],
                   children=[h.proc for h in hosts if h.proc])
    @staticmethod
    def _result(request: LaunchRequest, codes: list[int], timed_out: bool) -> LaunchResult:
        reason = read_failure_reason(request.job_root)
        if timed_out:
            return LaunchResult(False, None, f"training exceeded max_run_seconds={request.max_run_seconds} and was "
                                f"stopped; raise max_run_seconds or make it faster", TIMEOUT)
        bad = [c for c in codes if c != 0]
        if not bad:
            return LaunchResult(True, 0)
        code = next((c for c in bad if c > 0), bad[0])
        failure_class = exit_failure_class(code)
        if failure_class == USER_ERROR:
            return LaunchResult(False, code, reason or f"training failed with exit code {code}", USER_ERROR)
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return LaunchResult(False, code, reason or f"training process {how}", failure_class)

    def _record_pids(self, job_root: str) -> None:
        import psutil

        entries = []
        for host in self._hosts:  # in host order: a reattaching launcher maps them back to their hosts
            try:
                host.create_time = psutil.Process(host.pid).create_time()
            except psutil.Error:
                host.create_time = time.time()  # gone already: never matches a live process
            entries.append([host.pid, host.create_time])
        path = Path(job_root, PIDS_FILE)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, path)

    @staticmethod
    def _recorded_pids(job_root: str) -> list[tuple[int, float | None]]:
        try:
            return [(int(pid), float(ctime)) for pid, ctime in json.loads(Path(job_root, PIDS_FILE).read_text())]
        except (OSError, ValueError, TypeError):
            return []

    @staticmethod
    def _forget_pids(job_root: str) -> None:
        Path(job_root, PIDS_FILE).unlink(missing_ok=True)

    def _remove_logs(self) -> None:
        # The raw output may hold secrets the script printed: the task log has every line, masked; the job root
        # (kept for resumes and retention) must not keep them.
        for host in self._hosts:
            Path(host.log_path).unlink(missing_ok=True)

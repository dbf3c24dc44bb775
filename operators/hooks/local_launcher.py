"""Local backend (the embedded default): `train` as child processes on the Airflow worker.

instance_count N = N `train` processes sharing one job root, each told its host with --current-host; every host name
maps to 127.0.0.1 through trainingjobconfig.json host_addresses, so the runtime's distributed environment (MASTER_ADDR,
TF_CONFIG, ...) is the real one. Each process starts its own session, so the whole tree (the runtime, the user script
and anything it spawned) is found with psutil and killed together. The pids are recorded in the job root: a retry (or a
restarted worker) first kills what an earlier attempt left running, so two trainings of one job never run at once.

No training outlives its launcher: `train` gets --max-run-seconds and --die-with-parent (it enforces both itself),
and by default runs in a bubblewrap sandbox whose PID namespace dies with the worker (local_sandbox.py), with an
allowlisted environment and only its job root and channels visible.
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


class LocalLauncherHook:
    backend = "local"
    # Blocking only (the processes are children of this worker); input/data/<channel> is a link into the cache.
    capabilities = Capabilities(deferrable=False, mounts_channels=False)

    def __init__(self, python: str | None = None, sandbox: str | None = None,
                 environment_names: tuple[str, ...] | None = None):
        if sandbox is None or environment_names is None:
            from operators.settings import training_settings

            settings = training_settings()
            sandbox = settings.local_sandbox if sandbox is None else sandbox
            environment_names = settings.local_environment if environment_names is None else environment_names
        self.python = python or sys.executable
        self.sandbox = sandbox
        self.environment_names = tuple(environment_names)
        self._procs: list[subprocess.Popen] = []

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
        if leftovers and kill_trees(leftovers):
            log.warning("Killed a training of %s left running by an earlier attempt", request.job_name)
        lines: queue.Queue = queue.Queue()
        if self.sandbox == "bubblewrap":
            try:
                check_available()
            except SandboxUnavailable as err:
                return LaunchResult(False, None, str(err), PLATFORM_ERROR)
        self._start(request, lines)
        try:
            return self._wait(request, lines, on_line)
        finally:
            if any(p.poll() is None for p in self._procs):
                kill_trees([], children=self._procs)
            self._forget_pids(request.job_root)

    # -- internals ------------------------------------------------------------------------------------
    def _environment(self, request: LaunchRequest) -> dict[str, str]:
        # HOME is private: the worker's home (its ~/.aws, ~/.netrc, ...) is not the training's.
        home = "/tmp" if self.sandbox == "bubblewrap" else os.path.join(request.job_root, ".home")
        os.makedirs(home, exist_ok=True)
        return {**user_environment(os.environ, self.environment_names), "HOME": home, **request.env,
                **request.secret_env, "PYTHONPATH": runtime_path(), "PYTHONUNBUFFERED": "1", "TRAINING_ROOT": request.job_root,
                "TRAINING_JOB_VENV": "1"}

    def _command(self, request: LaunchRequest, host: str) -> list[str]:
        cmd = [self.python, "-m", "training_runtime", "--root", request.job_root, "--current-host", host,
               "--die-with-parent"]
        if request.max_run_seconds:
            cmd += ["--max-run-seconds", str(request.max_run_seconds)]
        if self.sandbox != "bubblewrap":
            return cmd
        return bwrap_command(cmd, request.job_root, readonly=sorted(set(request.channel_entries.values())),
                             hide=os.environ.get("AIRFLOW_HOME"))

    def _start(self, request: LaunchRequest, lines: queue.Queue) -> None:
        env = self._environment(request)
        multi = len(request.hosts) > 1
        for host in request.hosts:
            proc = subprocess.Popen(
                self._command(request, host),
                cwd=request.job_root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as a tree, not by signals meant for us
            )
            self._procs.append(proc)
            prefix = f"[{host}] " if multi else ""
            threading.Thread(target=self._pump, args=(proc, prefix, lines), daemon=True).start()
        self._record_pids(request.job_root)
        log.info("Started %d training process(es) for %s: pids %s", len(self._procs), request.job_name,
                 [p.pid for p in self._procs])

    @staticmethod
    def _pump(proc: subprocess.Popen, prefix: str, lines: queue.Queue) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines.put(prefix + raw.decode("utf-8", "replace").rstrip("\n"))
        lines.put(None)

    def _wait(self, request: LaunchRequest, lines: queue.Queue, on_line: LineCallback) -> LaunchResult:
        deadline = (time.monotonic() + request.max_run_seconds + DEADLINE_SLACK_SECONDS
                    if request.max_run_seconds else None)
        open_streams = len(self._procs)
        first_failure_at: float | None = None
        timed_out = False
        while open_streams or any(p.poll() is None for p in self._procs):
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
                kill_trees([], children=self._procs)
            failed = [p for p in self._procs if p.poll() not in (None, 0)]
            if failed and first_failure_at is None:
                first_failure_at = now
            if first_failure_at is not None and now - first_failure_at > PEER_FAILURE_GRACE_SECONDS:
                # A failed host leaves its peers waiting on collectives forever: stop them.
                running = [p for p in self._procs if p.poll() is None]
                if running:
                    log.error("A host of %s failed; stopping the %d still running", request.job_name, len(running))
                    kill_trees([], children=running)
        while True:  # lines queued after the last poll
            try:
                line = lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                on_line(line)
        return self._result(request, [p.returncode for p in self._procs], timed_out)

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
        for p in self._procs:
            try:
                entries.append([p.pid, psutil.Process(p.pid).create_time()])
            except psutil.Error:
                pass
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

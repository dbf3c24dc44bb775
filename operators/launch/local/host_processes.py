"""One host's `train` process as the local launcher knows it, and the records a retry finds it by.

A host's process was started by this launcher (``proc``, a Popen) or by an earlier attempt that this one reattaches to
(``process``, a psutil process already checked to be that launch's, or None when the record named no such process).
Its files are platform state in the job's launch directory (operators/state/job_state.py), outside the job root: its
output (``<host>.log``, opened by the launcher and handed to the process) and its exit status (``<host>.status``,
written by bubblewrap through --json-status-fd; unsandboxed, train's --exit-file ``<host>.exit``).

The pids are written down in host order (launch-pids.json, operators/state/launch_records.py), each with its start
time, so a retry maps them back to their hosts and never signals a recycled pid (operators/launch/local/processes.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from operators.launch.base import LaunchRequest
from operators.launch.local.network import sandbox_status
from operators.launch.local.processes import alive
from operators.state.job_state import LAUNCH_PIDS, state_path
from operators.state.launch_records import Record, ours, read_records, write_records


def _exit_code(value) -> int | None:
    """An exit status as a process can have one (0-255), else None (the caller reads that as killed)."""
    return value if type(value) is int and 0 <= value <= 255 else None


class HostProcess:
    """One host's process and its files in the launch directory; see the module docstring."""

    def __init__(self, name: str, launch_dir: str, proc: subprocess.Popen | None = None, process=None):
        self.name, self.proc, self.process = name, proc, process
        self.log_path = os.path.join(launch_dir, f"{name}.log")
        self.status_path = os.path.join(launch_dir, f"{name}.status")  # bubblewrap's --json-status-fd
        self.exit_path = os.path.join(launch_dir, f"{name}.exit")  # train's --exit-file (unsandboxed)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else self.process.pid if self.process else None

    def running(self) -> bool:
        if self.proc:
            return self.proc.poll() is None
        return self.process is not None and alive(self.process)

    def recorded_exit(self) -> int | None:
        """The exit code written down when the process ended (by bubblewrap, or by train unsandboxed)."""
        status = sandbox_status(self.status_path)
        if "exit-code" in status:
            return _exit_code(status["exit-code"])
        try:
            return _exit_code(int(Path(self.exit_path).read_text().strip()))
        except (OSError, ValueError):
            return None

    def wait(self, timeout: float) -> None:
        """Until the process ended or `timeout` s passed (a reattached process, not our child: `timeout` s)."""
        if self.proc:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        else:
            time.sleep(timeout)

    def returncode(self) -> int | None:
        if self.proc:
            return self.proc.poll()
        if self.running():
            return None
        code = self.recorded_exit()
        return -signal.SIGKILL if code is None else code  # gone without an exit status: killed


def record_hosts(request: LaunchRequest, hosts: list[HostProcess]) -> list[Record]:
    """Write the hosts' pids down, in host order (a reattaching launcher maps them back to their hosts)."""
    records = []
    for host in hosts:
        try:
            create_time = psutil.Process(host.pid).create_time()
        except psutil.Error:
            create_time = time.time()  # gone already: never matches a live process
        records.append((host.pid, create_time))
    write_records(state_path(request.workspace, request.job_name, LAUNCH_PIDS), records)
    return records


def recorded_processes(request: LaunchRequest) -> list:
    """The processes an earlier attempt recorded, in host order: each the live process it started for this job
    root, or None (ended, recycled pid, not a launch of this job)."""
    records = read_records(state_path(request.workspace, request.job_name, LAUNCH_PIDS))
    return [ours(pid, ctime, request.job_root) for pid, ctime in records]


def forget_hosts(request: LaunchRequest) -> None:
    Path(state_path(request.workspace, request.job_name, LAUNCH_PIDS)).unlink(missing_ok=True)


def remove_logs(hosts: list[HostProcess]) -> None:
    # The raw output may hold secrets the script printed: the task log has every line, masked; the platform keeps no
    # copy once it was reported.
    for host in hosts:
        Path(host.log_path).unlink(missing_ok=True)

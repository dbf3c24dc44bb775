"""The local backend's processes: their records in the job's state directory, and killing exactly them.

A training outlives the task process that launched it (a retry reattaches), so its pids are written down:
`<state dir>/launch-pids.json`, `[[pid, create time], ...]` in host order, where user code cannot write
(operators/state/job_state.py). Even so a record is only acted on when it still names the process the launcher started:
pid an int > 1, create time a finite number matching the live process's within a second (pids are recycled), and the
process's command line naming this job root (bubblewrap's `--bind <root> <root>`, or train's `--root <root>`). A
record that fails any of these is not ours: nothing is signalled.

Killing a host kills its process tree: the launcher's process (bubblewrap, or `train` unsandboxed) and its
descendants. In the sandbox that tree is exactly the job's: bubblewrap's --unshare-pid puts everything the user code
starts in one PID namespace below it (a double fork lands on the namespace's init, still below it), and SIGKILL of
that init ends the namespace whole, so nothing started during the grace period survives either.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time

KILL_GRACE_SECONDS = 10.0
CREATE_TIME_SLACK = 1.0

Record = tuple[int, float]


def parse_records(text: str) -> list[Record]:
    """The records of a launch-pids.json; [] when anything in it is malformed (never a partial list)."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    records: list[Record] = []
    if not isinstance(data, list):
        return []
    for entry in data:
        if not (isinstance(entry, list) and len(entry) == 2):
            return []
        pid, ctime = entry
        if type(pid) is not int or pid <= 1 or type(ctime) not in (int, float) or not math.isfinite(ctime) \
                or ctime <= 0:
            return []
        records.append((pid, float(ctime)))
    return records


def read_records(path: str) -> list[Record]:
    try:
        with open(path) as f:
            return parse_records(f.read())
    except OSError:
        return []


def write_records(path: str, records: list[Record]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump([[pid, ctime] for pid, ctime in records], f)
    os.replace(tmp, path)


def ours(pid: int, create_time: float, job_root: str):
    """The live process `pid` if it is the one the launcher started for `job_root`, else None."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > CREATE_TIME_SLACK:
            return None  # the pid was recycled
        if os.path.realpath(job_root) not in {os.path.realpath(a) for a in proc.cmdline() if a.startswith("/")}:
            return None  # alive, but not a launch of this job root
        return proc
    except (psutil.Error, OSError):
        return None


def alive(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree(proc) -> list:
    import psutil

    if proc is None:
        return []
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def kill_trees(roots: list, grace: float = KILL_GRACE_SECONDS, children: list[subprocess.Popen] = ()) -> int:
    """SIGTERM every process of the trees below `roots` (psutil processes already checked with `ours`) and below our
    own `children`; SIGKILL what is still alive after `grace` seconds.

    Our own children are waited for through their Popen objects: reaping them here (psutil) would make Popen report
    exit code 0 for a process that was killed.
    """
    import psutil

    own = {p.pid for p in children}
    procs = [p for root in roots for p in tree(root)]
    procs += [p for child in children if child.poll() is None for p in tree(_process(child.pid))]
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
    _, still = psutil.wait_procs(others, timeout=max(0.1, deadline - time.monotonic()))
    still += [p for p in procs if p.pid in own and alive(p)]
    for proc in still:
        try:
            proc.kill()  # psutil checks the process is still the one it listed (pid reuse)
        except psutil.Error:
            pass
    for child in children:
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            pass
    psutil.wait_procs([p for p in still if p.pid not in own], timeout=5)
    return len(procs)


def _process(pid: int):
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None

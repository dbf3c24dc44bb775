"""The local backend's processes: killing exactly the ones its records name (operators/state/launch_records.py:
a record is acted on only while it still names the process the launcher started; otherwise nothing is signalled).

Killing a host kills its process tree: the launcher's process (bubblewrap, or `train` unsandboxed) and its
descendants. In the sandbox that tree is exactly the job's: bubblewrap's --unshare-pid puts everything the user code
starts in one PID namespace below it (a double fork lands on the namespace's init, still below it), and SIGKILL of
that init ends the namespace whole, so nothing started during the grace period survives either.
"""

from __future__ import annotations

import signal
import subprocess
import time

import psutil

KILL_GRACE_SECONDS = 10.0


def alive(proc) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree(proc) -> list:
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
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None

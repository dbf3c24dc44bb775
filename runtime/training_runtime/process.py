"""Running a child process: output streamed through, signals forwarded.

The child runs in its own process group (its own session) so that a SIGTERM or
SIGINT that ``train`` receives reaches the whole user process tree (a shell
command's children too) exactly once. Its stdout and stderr are copied line by
line to ours and flushed at once; the last lines of its stderr are kept for the
failure reason. When the child exits, processes it left behind in its group
(background jobs holding the output pipes) are stopped, so ``train`` never hangs
and nothing leaks on the Airflow machine in local mode.
"""

import collections
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional

log = logging.getLogger(__name__)

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
MAX_LINE_BYTES = 64 * 1024
#: How long the output readers may take after the child exited before leftover
#: processes in its group are stopped.
DRAIN_SECONDS = 1.0
LEFTOVER_GRACE_SECONDS = 3.0
#: Between SIGTERM and SIGKILL when the deadline passes (time to save a checkpoint).
DEADLINE_GRACE_SECONDS = 10.0
#: Held while a whole line goes to our stdout, so that lines written beside the child's (metrics_echo) never split one.
OUTPUT_LOCK = threading.Lock()


@dataclass
class Result:
    #: The child's exit code; 128+n when a signal n killed it.
    exit_code: int
    #: The last lines of its stderr (of its output when merged).
    tail: list[str]
    #: The signal ``train`` received and forwarded while the child ran, if any.
    stopped_by: Optional[int] = None
    #: The child ran past ``deadline`` and was stopped (SIGTERM to its group, SIGKILL after the grace).
    timed_out: bool = False


def run(argv, cwd=None, env=None, merge_output=False, output=None, tail_lines=50, deadline=None,
        preexec_fn=None):
    """Run ``argv`` (never through a shell unless argv itself starts one).

    ``merge_output`` sends the child's stderr into its stdout stream; ``output``
    (a binary stream, default our stdout) receives that stream. The child's own
    stderr always goes to our stderr. ``deadline`` (a ``time.monotonic()`` value)
    stops the child's group when it passes. Raises ``OSError`` when it cannot start.
    """
    out = output if output is not None else _binary(sys.stdout)
    # Handlers first: a signal that arrives while the child starts is held and
    # forwarded as soon as the child exists, never lost and never fatal to us.
    forwarder = _SignalForwarder()
    forwarder.install()
    try:
        if forwarder.received is not None:  # stopped before we even started
            return Result(exit_code=128 + forwarder.received, tail=[], stopped_by=forwarder.received)
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_output else subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
        tail = collections.deque(maxlen=tail_lines)
        readers = [_start_reader(proc.stdout, out, tail if merge_output else None)]
        if not merge_output:
            readers.append(_start_reader(proc.stderr, _binary(sys.stderr), tail))
        forwarder.attach(proc.pid)
        timed_out = False
        try:
            returncode, timed_out = _wait(proc, deadline)
        finally:
            if proc.poll() is None:  # we are leaving early (an exception): take the child down
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            _finish(proc.pid, readers)
    finally:
        forwarder.uninstall()
    exit_code = 128 - returncode if returncode < 0 else returncode
    return Result(exit_code=exit_code, tail=list(tail), stopped_by=forwarder.received, timed_out=timed_out)


def _wait(proc, deadline):
    """(return code, whether the deadline stopped it)."""
    if deadline is None:
        return proc.wait(), False
    try:
        return proc.wait(max(0.0, deadline - time.monotonic())), False
    except subprocess.TimeoutExpired:
        pass
    log.error("the user code ran past max_run_seconds: stopping it (SIGTERM, SIGKILL after %.0f s)",
              DEADLINE_GRACE_SECONDS)
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(DEADLINE_GRACE_SECONDS), True
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        return proc.wait(), True


def _binary(stream):
    return getattr(stream, "buffer", stream)


def _start_reader(pipe, destination, tail):
    def copy():
        with pipe:
            for line in iter(lambda: pipe.readline(MAX_LINE_BYTES), b""):
                try:
                    with OUTPUT_LOCK:
                        destination.write(line)
                        destination.flush()
                except (OSError, ValueError):
                    pass  # our own output is gone; keep draining so the child never blocks
                if tail is not None:
                    tail.append(line.decode("utf-8", "replace").rstrip("\r\n"))

    thread = threading.Thread(target=copy, name="output-copy", daemon=True)
    thread.start()
    return thread


def _finish(pgid, readers):
    """Let the readers drain; stop what the child left running in its group."""
    deadline = time.monotonic() + DRAIN_SECONDS
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    if _group_alive(pgid):
        log.warning("the user code left processes running; stopping them (SIGTERM, then SIGKILL)")
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + LEFTOVER_GRACE_SECONDS
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(pgid, signal.SIGKILL)
    for reader in readers:
        reader.join(DRAIN_SECONDS)


def _group_alive(pgid):
    """Whether a live (not zombie) process is left in the group."""
    if os.path.isdir("/proc/self"):
        return any(_live_member(entry, pgid) for entry in os.listdir("/proc") if entry.isdigit())
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _live_member(pid, pgid):
    try:
        with open("/proc/%s/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2:].split()
    return len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid


def _signal_group(pgid, signum):
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class _SignalForwarder:
    """Forwards SIGTERM/SIGINT/SIGHUP to the child's process group while it runs."""

    def __init__(self):
        self.pgid = None
        self.received = None
        self._previous = {}

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for signum in FORWARDED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._forward)

    def attach(self, pgid):
        self.pgid = pgid
        if self.received is not None:
            _signal_group(pgid, self.received)

    def uninstall(self):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _forward(self, signum, frame):
        if self.received is None:
            self.received = signum
        log.warning("received %s: forwarding it to the user code", signal.Signals(signum).name)
        if self.pgid is not None:
            _signal_group(self.pgid, signum)

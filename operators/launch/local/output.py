"""A local job's output as the worker holds it: each host's log file, tailed into one bounded queue of lines.

A line longer than MAX_LINE_BYTES is passed on in pieces (a job printing without newlines never makes the worker hold its
output whole), and at most MAX_QUEUED_LINES lines wait to be logged and matched (a job printing faster than the task
log takes it waits in its log file, which its disk cap holds: RLIMIT_FSIZE).
"""

from __future__ import annotations

import queue
from typing import Callable, Protocol

MAX_LINE_BYTES = 64 * 1024
MAX_QUEUED_LINES = 10_000


class FollowedHost(Protocol):
    log_path: str
    running: Callable[[], bool]
    wait: Callable[[float], None]  # returns when the process ended or `timeout` s passed


def follow_log(host: FollowedHost, prefix: str, lines: queue.Queue) -> None:
    """Tail the host's log file until the process is gone and everything it wrote was read; None ends the stream."""
    try:
        f = open(host.log_path, "rb")
    except OSError:  # the earlier attempt's log is gone (the job ended and was reported): nothing to follow
        lines.put(None)
        return
    with f:
        pending = b""
        while True:
            finished = not host.running()  # checked before reading: nothing it wrote can be missed
            chunk = f.read(65536)
            if chunk:
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    lines.put(prefix + raw.decode("utf-8", "replace"))
                while len(pending) > MAX_LINE_BYTES:
                    lines.put(prefix + pending[:MAX_LINE_BYTES].decode("utf-8", "replace"))
                    pending = pending[MAX_LINE_BYTES:]
                continue
            if finished:
                break
            # Woken by the process's end rather than a fixed sleep: a short job's last lines (and its end) are seen
            # at once, not up to 0.1 s later.
            host.wait(0.1)
        if pending:
            lines.put(prefix + pending.decode("utf-8", "replace"))
    lines.put(None)

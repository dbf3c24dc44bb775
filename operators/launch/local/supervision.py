"""Watching a local training to its end: its hosts' lines into the task log, max_run_seconds, a failed host's waiting
peers, and the lease that stops `train` once nobody watches it.

`train` enforces max_run_seconds itself (SIGTERM, SIGKILL 10 s later); the deadline here is the safety net behind it.
A host that failed leaves its peers waiting on collectives forever: they are stopped PEER_FAILURE_GRACE_SECONDS later
(long enough for them to fail by themselves and say why). The lease (launch/lease in the job's state directory) is
touched while the launcher watches; `train` stops itself once it is older than [training] local_lease_seconds.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

from operators.launch.base import LaunchRequest, LineCallback
from operators.launch.local.host_processes import HostProcess
from operators.launch.local.processes import kill_trees

log = logging.getLogger(__name__)

PEER_FAILURE_GRACE_SECONDS = 15.0
DEADLINE_SLACK_SECONDS = 30.0


def renew_lease(path: str, lease_seconds: float, done: threading.Event) -> None:
    """Touch the lease while we watch the training: `train` stops itself once nobody did for lease_seconds."""
    every = max(0.5, min(10.0, lease_seconds / 10)) if lease_seconds else 10.0
    while not done.wait(every):
        try:
            os.utime(path, follow_symlinks=False)  # in the state dir: never a link, and never followed
        except OSError as err:
            log.warning("Cannot renew the training's lease %s: %s", path, err)


def kill_hosts(hosts: list[HostProcess]) -> None:
    kill_trees([h.process for h in hosts if not h.proc and h.process is not None],
               children=[h.proc for h in hosts if h.proc])


def wait_for_hosts(request: LaunchRequest, hosts: list[HostProcess], lines: queue.Queue,
                   on_line: LineCallback) -> tuple[list[int | None], bool]:
    """Pass the hosts' lines on until every process ended and every log was read: (their exit codes, timed out)."""
    deadline = (time.monotonic() + request.max_run_seconds + DEADLINE_SLACK_SECONDS
                if request.max_run_seconds else None)
    open_streams = len(hosts)
    first_failure_at: float | None = None
    timed_out = False
    while open_streams or any(h.running() for h in hosts):
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
            kill_hosts([h for h in hosts if h.running()])
        failed = [h for h in hosts if h.returncode() not in (None, 0)]
        if failed and first_failure_at is None:
            first_failure_at = now
        if first_failure_at is not None and now - first_failure_at > PEER_FAILURE_GRACE_SECONDS:
            running = [h for h in hosts if h.running()]
            if running:
                log.error("A host of %s failed; stopping the %d still running", request.job_name, len(running))
                kill_hosts(running)
    while True:  # lines queued after the last poll
        try:
            line = lines.get_nowait()
        except queue.Empty:
            break
        if line is not None:
            on_line(line)
    return [h.returncode() for h in hosts], timed_out

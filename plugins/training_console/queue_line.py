"""Where a Kubernetes job waiting in a Kueue queue, or a local job waiting for the worker's GPUs, stands, for the list
and the job page.

The launch stage records the queue before it defers (XCom "queue": {queue, priority}); the wait itself happens in
the triggerer, which logs each change (operators/launch/kubernetes/watch.py:
`[kubernetes] queued in team-a (position 2, waiting for cpu: ...)`, `preempted in ...`, `admitted by Kueue in ...`).
The latest of those lines is read from the task's log through Airflow's own log reader (the one behind the REST
API's log route, so it finds the triggerer's log files as the task's Logs tab does).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Iterable

from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.utils.log.log_reader import TaskLogReader
from sqlalchemy import select
from sqlalchemy.orm import joinedload

log = logging.getLogger(__name__)

QUEUE_KEY = "queue"  # operators/stages/launch_training.py
# The lines operators/launch/kubernetes/workload.py writes about a Workload (the watch prefixes "[kubernetes] "), at the
# start of an event: a training's own output arrives prefixed with its host and cannot pose as one.
_QUEUE_LINE = re.compile(r"\[kubernetes\] ((?:still )?(?:queued in |preempted in |evicted in |quota reserved in |"
                         r"waiting for Kueue to queue |admitted by Kueue in ).*)")
# A local job waiting for the worker's GPUs (operators/launch/worker_slots.py): only that logger's records count, a
# training's output (logged by the launch stage) cannot pose as one.
_GPU_LOGGER = "operators.launch.worker_slots"
_GPU_LINE = re.compile(r"(?:Waiting for \d+ GPU\(s\): |Given GPU\(s\) ).*")
_GIVEN = ("admitted by Kueue", "Given GPU(s)")


def latest_queue_line(events: Iterable[Any]) -> str | None:
    """The last line about the Job's place in its queue among the log's events (strings or structured records)."""
    latest = None
    for event in events:
        text = event if isinstance(event, str) else getattr(event, "event", None) or (
            event.get("event") if isinstance(event, dict) else None)
        if not isinstance(text, str):
            continue
        match = _QUEUE_LINE.match(text)  # the watch's own event; a host line ("[pod] ...") never
        if match:
            latest = match.group(1)
        elif _logger(event) == _GPU_LOGGER and _GPU_LINE.match(text):
            latest = text
    return latest


def _logger(event: Any) -> str | None:
    return event.get("logger") if isinstance(event, dict) else getattr(event, "logger", None)


def still_queued(line: str | None) -> bool:
    """Whether the Job still waits for Kueue (no line read yet: it has not been admitted either)."""
    return line is None or not line.startswith(_GIVEN)


REREAD_SECONDS = 5.0  # the list and every open job page poll: one read of a log serves them all for this long
_READ: dict[tuple, tuple[float, str | None]] = {}


def read_queue_line(session, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str | None:
    """The latest queue line of one try of launch_training, or None (no log yet, or the log cannot be read). The whole
    log is read (Airflow's reader has no tail), so a reading is reused for REREAD_SECONDS."""
    key = (dag_id, run_id, task_id, map_index, try_number)
    now = time.monotonic()
    cached = _READ.get(key)
    if cached is not None and (now - cached[0] < REREAD_SECONDS or not still_queued(cached[1])):
        return cached[1]  # admitted: that try waits no more, its log need not be read again
    if len(_READ) > 256:
        _READ.clear()
    line = _read(session, dag_id, run_id, task_id, map_index, try_number)
    _READ[key] = (now, line)
    return line


def _read(session, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str | None:
    reader = TaskLogReader()
    if not try_number or not reader.supports_read:
        return None
    ti = session.scalar(select(TaskInstance)
                        .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
                               TaskInstance.task_id == task_id, TaskInstance.map_index == map_index)
                        .options(joinedload(TaskInstance.trigger).joinedload(Trigger.triggerer_job),
                                 joinedload(TaskInstance.dag_run)))
    if ti is None:
        return None
    try:
        events, _ = reader.read_log_chunks(ti, try_number, {})
        return latest_queue_line(events)
    except Exception as err:  # noqa: BLE001 - the page shows "queued in <queue>" without the position then
        log.warning("Could not read the log of %s %s %s to show its queue position: %s", dag_id, run_id, task_id, err)
        return None

"""Log cursors kept on the training Job itself, so a restarted triggerer shows no pod log line twice.

A triggerer that stops (a deploy, a node drain, kill -9) hands its triggers to the next one, which recreates them
from their original, serialized arguments: without more, the new watch would follow every pod's log from the start
and the task log would show it all again. So the watch keeps its cursors (per pod: the last timestamp shown and how
many lines had it, operators/launch/log_stream.py) in the Job's annotation `training.airflow/log-cursors`, patched
when they moved (at most once a poll) and once more when the watch is cancelled; the next watch of the same Job
(same object: a recreated Job of the same name has none) starts from them. The Job is the one place every
triggerer can reach. It needs `patch` on jobs (docs/kubernetes.md); without it the watch says so once and goes on.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

CURSORS_ANNOTATION = "training.airflow/log-cursors"


class CursorKeeper:
    """Keeps one Job's cursors on its annotation: `load` once from the first look at the Job, `save` when they moved."""

    def __init__(self, name: str, namespace: str, say, enabled: bool = True):
        self.name, self.namespace, self.say = name, namespace, say
        self.enabled = enabled  # False: load and save do nothing (the blocking launcher's watch)
        self.saved: str | None = None  # the annotation's value as last read or written; None: not loaded yet

    def load(self, job: Any, cursors: dict[str, list[int]]) -> None:
        if not self.enabled or self.saved is not None:
            return
        self.saved, kept = read_cursors(job)
        for pod, cursor in kept.items():
            cursors.setdefault(pod, cursor)
        if kept:
            self.say(f"resuming the logs of {len(kept)} pod(s) where an earlier watch left them")

    async def save(self, batch: Any, cursors: dict[str, list[int]]) -> None:
        if not self.enabled or self.saved is None:
            return
        value = encode_cursors(cursors)
        if value in (self.saved, "{}"):
            return
        try:
            await write_cursors(batch, self.name, self.namespace, value)
            self.saved = value
        except ApiException as err:
            if err.status in (401, 403):
                self.enabled = False
                self.say(f"cannot keep the log position on Job {self.namespace}/{self.name} (HTTP {err.status}: "
                         "the Role lacks patch on jobs, docs/kubernetes.md): a triggerer restart will show the logs "
                         "again from the start")
            elif err.status != 404:
                self.say(f"could not keep the log position on the Job (HTTP {err.status}); trying again",
                         f"cursor:{err.status}")


def read_cursors(job: Any) -> tuple[str, dict[str, list[int]]]:
    """(the annotation's raw value, {pod: [timestamp ns, count]}) of a V1Job; an unreadable value counts as none."""
    raw = ((job.metadata.annotations if job.metadata else None) or {}).get(CURSORS_ANNOTATION) or ""
    try:
        kept = {pod: [int(c[0]), int(c[1])] for pod, c in json.loads(raw).items()} if raw else {}
    except (ValueError, TypeError, AttributeError, IndexError):
        kept = {}
    return raw, kept


def encode_cursors(cursors: dict[str, list[int]]) -> str:
    return json.dumps({pod: list(c) for pod, c in sorted(cursors.items()) if c[0]}, separators=(",", ":"))


async def write_cursors(batch: Any, name: str, namespace: str, value: str) -> None:
    """Merge-patch the annotation (raises the client's ApiException)."""
    await batch.patch_namespaced_job(name, namespace, {"metadata": {"annotations": {CURSORS_ANNOTATION: value}}})

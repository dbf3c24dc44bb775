"""The training pods' logs into the task log: each running pod's log followed while the watch runs, and read once
more at the end for the lines the follow stream missed.

Every read asks for timestamps (timestamps=true) and passes on only the lines after the pod's cursor (the last
timestamp shown, in nanoseconds, and how many lines had it: operators/launch/log_stream.py), so neither a reconnect nor
the final read repeats or loses a line. Both ask Kubernetes for a little more than the time since the last line seen
(since_seconds plus a margin), so a clock difference between this machine and the node loses nothing.

- :class:`PodLogFollowers`: the watch's follow streams (kubernetes_asyncio, in the triggerer or the blocking launcher's
  event loop); the cursors they move are the watch event's ``log_cursors``, kept on the Job by the trigger
  (operators/launch/kubernetes/log_cursors.py).
- :func:`catch_up_logs`: the end-of-job read (the sync client, on the worker), from the event's cursors. The provider's
  PodManager is not used for it: it logs through its own logger and re-reads by whole seconds, which can drop or repeat
  lines.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping

from kubernetes.client.rest import ApiException

from operators.launch.base import LineCallback
from operators.launch.kubernetes.manifests import CONTAINER_NAME
from operators.launch.kubernetes.pods import train_status
from operators.launch.log_stream import Emit, LogCursor, deliver_line, since_seconds

# Reconnecting a follow stream asks for a little more than the time since the last line seen.
SINCE_MARGIN_SECONDS = 120
# The final read asks for the recent part of a long log only: from a while before the last line seen.
CATCH_UP_MARGIN_SECONDS = 600


class PodLogFollowers:
    """One follow stream per started pod of a Job, each resuming from its cursor when the connection drops."""

    def __init__(self, namespace: str, poll_interval: float, emit: Emit, say: Callable[[str], None],
                 host_of: Callable[[str], str], prefixed: bool):
        """host_of: a pod's host name (its lines are prefixed with it when `prefixed`, i.e. more than one host)."""
        self.namespace = namespace
        self.poll_interval = poll_interval
        self.emit = emit
        self.say = say
        self.host_of = host_of
        self.prefixed = prefixed
        self.cursors: dict[str, list[int]] = {}  # pod -> [last timestamp ns, lines seen at it]
        self.ended: set[str] = set()  # pods whose container has terminated: their stream ends for good
        self.streams: dict[str, asyncio.Task] = {}

    def deliver(self, pod_name: str, raw: bytes, cursor: LogCursor) -> None:
        deliver_line(raw, cursor, self.emit, self.host_of(pod_name) if self.prefixed else None)

    async def follow(self, core: Any, pod_name: str) -> None:
        cursor_state = self.cursors.setdefault(pod_name, [0, 0])
        while True:
            since = since_seconds(cursor_state, SINCE_MARGIN_SECONDS, time.time())
            try:
                # _preload_content=False: an aiohttp response to read as it comes; errors are not raised.
                response = await core.read_namespaced_pod_log(
                    name=pod_name,
                    namespace=self.namespace,
                    container=CONTAINER_NAME,
                    follow=True,
                    timestamps=True,
                    since_seconds=since,
                    _preload_content=False,
                    _request_timeout=(30, 600),
                )
                try:
                    if response.status == 404:
                        return
                    if response.status == 200:
                        cursor = LogCursor(cursor_state)
                        buffer = b""
                        async for chunk in response.content.iter_any():
                            buffer += chunk
                            *lines, buffer = buffer.split(b"\n")
                            for raw in lines:
                                self.deliver(pod_name, raw, cursor)
                        # An unterminated last piece may be a line cut by a dropped connection: the next
                        # read (or the final catch-up) passes it on whole.
                finally:
                    response.close()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # connection dropped, read timeout: resume from the cursor
                self.say(f"log stream of {self.host_of(pod_name)} interrupted ({type(err).__name__}); resuming")
            # The stream ended: the container exited (the next poll will tell) or the connection dropped.
            if pod_name in self.ended:
                return
            await asyncio.sleep(self.poll_interval)
            if pod_name in self.ended:
                return

    def update(self, core: Any, pods: list[Any]) -> None:
        """Note the pods whose container ended; follow each pod whose container has started and is not followed."""
        for pod in pods:
            name = pod.metadata.name
            status = train_status(pod)
            state = status.state if status else None
            if state is not None and state.terminated is not None:
                self.ended.add(name)
            started = state is not None and (state.running is not None or state.terminated is not None)
            if started and name not in self.streams:
                self.streams[name] = asyncio.ensure_future(self.follow(core, name))

    async def stop(self, wait: float) -> None:
        """Let the streams of exited containers end by themselves (briefly); cut the others."""
        ending = [task for pod, task in self.streams.items() if pod in self.ended and not task.done()]
        if ending:
            await asyncio.wait(ending, timeout=wait)
        self.cancel()
        for task in self.streams.values():
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    def cancel(self) -> None:
        for task in self.streams.values():
            if not task.done():
                task.cancel()


def catch_up_logs(core: Any, namespace: str, name: str, pods: Mapping[str, int], cursors: Mapping[str, list[int]],
                  instance_count: int, on_line: LineCallback, warn: Callable[[str], None]) -> None:
    """The lines each pod of Job `name` wrote after its cursor (a follow stream can miss the last ones), in host
    order; pods: {pod name: host index} as the watch saw them. warn: a log line for a log that could not be read."""
    for pod, index in sorted(pods.items(), key=lambda item: (item[1], item[0])):
        cursor_state = list(cursors.get(pod) or [0, 0])
        # Only the recent part of a long log: from a while before the last line seen (the margin absorbs a clock
        # difference with the node; the cursor drops what was passed on already).
        since = since_seconds(cursor_state, CATCH_UP_MARGIN_SECONDS, time.time())
        try:
            response = core.read_namespaced_pod_log(
                name=pod,
                namespace=namespace,
                container=CONTAINER_NAME,
                timestamps=True,
                since_seconds=since,
                _preload_content=False,
            )
            data = response.data
        except ApiException as err:
            if err.status not in (400, 404):  # 400: never started; 404: gone
                warn(f"Could not read the log of pod {pod} ({err.status} {err.reason})")
            continue
        cursor = LogCursor(cursor_state)
        host = f"{name}-{index}" if instance_count > 1 else None
        for raw in data.split(b"\n"):
            if raw:
                deliver_line(raw, cursor, on_line, host)

"""Following a Docker container's log into the task log (one thread per container), each line passed on once
across the live stream and the catch-up read at the end (timestamps, operators.launch.log_stream)."""

from __future__ import annotations

import threading
from typing import Any

from operators.launch.base import LineCallback
from operators.launch.log_stream import LogCursor, deliver_line


class LogFollower(threading.Thread):
    """Follows one container's log into on_line, remembering the last timestamp passed on."""

    def __init__(self, client: Any, container: str, host: str | None, on_line: LineCallback):
        super().__init__(name=f"logs-{container}", daemon=True)
        self.client, self.container, self.host, self.on_line = client, container, host, on_line
        self.cursor = [0, 0]
        self.lock = threading.Lock()
        self.stream: Any = None
        self.stopped = False

    def run(self) -> None:
        try:
            since = self.cursor[0] / 1e9 - 1 if self.cursor[0] else None
            self.stream = self.client.logs(self.container, stream=True, follow=True, timestamps=True, since=since)
            cursor, buffer = LogCursor(self.cursor), b""
            for chunk in self.stream:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                with self.lock:
                    for raw in lines:
                        deliver_line(raw, cursor, self.on_line, self.host)
        except Exception:  # the stream was closed by stop(), or the container went away
            pass

    def stop(self) -> None:
        self.stopped = True
        stream = self.stream
        if stream is not None:
            try:
                stream.close()
            except Exception:
                pass

    def catch_up(self) -> None:
        """The lines after the cursor (a follow stream may close before the last ones)."""
        with self.lock:
            since = self.cursor[0] / 1e9 - 1 if self.cursor[0] else None
            data = self.client.logs(self.container, stream=False, timestamps=True, since=since)
            cursor = LogCursor(self.cursor)
            for raw in data.split(b"\n"):
                if raw:
                    deliver_line(raw, cursor, self.on_line, self.host)

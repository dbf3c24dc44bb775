"""Reading a container log stream with timestamps (the kubelet's and the Docker engine's `timestamps=true`
form) so that re-reads pass on each line exactly once: a follow stream can close before the last lines are
flushed, and the reader fetches the log once more and continues after its cursor.
"""

from __future__ import annotations

import re
from calendar import timegm
from typing import Callable

Emit = Callable[[str], None]

_TIMESTAMP = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def parse_timestamp_ns(text: str) -> int | None:
    """RFC3339 / RFC3339Nano (what the kubelet prefixes with timestamps=true) -> ns since the epoch."""
    match = _TIMESTAMP.match(text)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    seconds = timegm((int(year), int(month), int(day), int(hour), int(minute), int(second), 0, 0, 0))
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))


def split_log_line(line: str) -> tuple[int | None, str]:
    stamp, _, message = line.partition(" ")
    ts = parse_timestamp_ns(stamp)
    return (ts, message) if ts is not None else (None, line)


class LogCursor:
    """Passes on each log line once across re-reads: remembers the last timestamp and how many lines had it.

    `cursor` is the mutable [timestamp ns, count] pair kept per container (and carried in trigger events).
    Create one LogCursor per read of the log.
    """

    def __init__(self, cursor: list[int]):
        self.cursor = cursor
        self._skip_ts, self._skip_count = cursor[0], cursor[1]
        self._same = 0

    def accept(self, ts: int) -> bool:
        if ts < self._skip_ts:
            return False
        if ts == self._skip_ts and self._same < self._skip_count:
            self._same += 1
            return False
        if ts == self.cursor[0]:
            self.cursor[1] += 1
        else:
            self.cursor[0], self.cursor[1] = ts, 1
        return True


def deliver_line(raw: bytes, cursor: LogCursor, emit: Emit, host: str | None) -> None:
    """One line of a container's log (with its timestamp) -> emit, unless the cursor has passed it on already."""
    ts, message = split_log_line(raw.decode("utf-8", errors="replace").rstrip("\r"))
    if ts is not None and not cursor.accept(ts):
        return
    emit(f"[{host}] {message}" if host else message)


def since_seconds(cursor: list[int], margin: int, now: float) -> int | None:
    """How far back to re-read a log to reach the cursor, with a margin for clock differences (None: all of it)."""
    if not cursor[0]:
        return None
    return max(1, int(now - cursor[0] / 1e9) + margin)

"""Progress reporting for long transfers: a few log lines, never one per object.

A transfer of 10,000 small objects must not write 10,000 lines into the Airflow task log, and a
single 50 GiB object must not stay silent for ten minutes. `TransferProgress` is fed from the
transfer threads (bytes as they arrive, files as they land) and writes at most one line per
`interval` seconds, plus one line when the transfer starts and one when it ends. It uses the
standard `logging` module, which Airflow's task logging captures.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 5.0


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as `du -h` and the cloud consoles show them)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - loop always returns


def format_duration(seconds: float) -> str:
    """75 -> '1m15s'; keeps ETAs short and readable."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class TransferProgress:
    """Thread-safe byte/file counters that log a summary line at a bounded rate.

    `description` names the transfer ("download s3://bucket/data/ -> /ws/cache/tmp-..."); it must not
    contain credentials (URIs never do: credentials live in Airflow connections).
    """

    def __init__(
        self,
        description: str,
        total_bytes: int | None = None,
        total_files: int | None = None,
        *,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.description = description
        self.total_bytes = total_bytes
        self.total_files = total_files
        self.interval = interval
        self._log = logger or log
        self._clock = clock
        self._lock = threading.Lock()
        self._bytes = 0
        self._files = 0
        self._started = clock()
        self._last_line = self._started
        self._finished = False

    @property
    def bytes_done(self) -> int:
        return self._bytes

    @property
    def files_done(self) -> int:
        return self._files

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    def start(self) -> None:
        parts = []
        if self.total_files is not None:
            parts.append(f"{self.total_files} file{'s' if self.total_files != 1 else ''}")
        if self.total_bytes is not None:
            parts.append(format_bytes(self.total_bytes))
        self._log.info("%s: starting%s", self.description, f" ({', '.join(parts)})" if parts else "")

    def add_bytes(self, amount: int) -> None:
        # s3transfer reports negative amounts when it retries a part: they are real corrections.
        with self._lock:
            self._bytes += amount
            line = self._due_line()
        if line:
            self._log.info("%s", line)

    def add_file(self, count: int = 1) -> None:
        with self._lock:
            self._files += count
            line = self._due_line()
        if line:
            self._log.info("%s", line)

    def finish(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            elapsed = max(self._clock() - self._started, 1e-9)
            files, done = self._files, self._bytes
        self._log.info(
            "%s: done, %d file%s, %s in %s (%s/s)",
            self.description,
            files,
            "s" if files != 1 else "",
            format_bytes(done),
            format_duration(elapsed) if elapsed >= 1 else f"{elapsed:.2f}s",
            format_bytes(done / elapsed),
        )

    def _due_line(self) -> str | None:
        """The progress line if one is due now (caller holds the lock), else None."""
        now = self._clock()
        if self._finished or now - self._last_line < self.interval:
            return None
        self._last_line = now
        elapsed = max(now - self._started, 1e-9)
        rate = self._bytes / elapsed
        text = [f"{self.description}: {format_bytes(self._bytes)}"]
        if self.total_bytes:
            pct = min(100.0, 100.0 * self._bytes / self.total_bytes)
            text[0] += f" of {format_bytes(self.total_bytes)} ({pct:.0f}%)"
        files = f"{self._files}"
        if self.total_files is not None:
            files += f" of {self.total_files}"
        text.append(f"{files} files")
        text.append(f"{format_bytes(rate)}/s")
        if self.total_bytes and rate > 0:
            remaining = max(0, self.total_bytes - self._bytes)
            text.append(f"ETA {format_duration(remaining / rate)}")
        return ", ".join(text)

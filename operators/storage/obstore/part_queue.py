"""Bytes written by a producer thread, cut into upload parts for a consumer on an event loop (obstore.uploads'
stream uploads).

The producer (the packer) never waits on the consumer's per-part work (hashing, handing a part to object_store):
full parts queue up, at most `ahead` of them, and only beyond that does `write` block, so memory stays bounded
and the two sides overlap. One copy per byte at most (joining the writes that make a part); a pipe between two
threads, as storage.botocore.stream uses for s3transfer, copies twice and stalls the producer whenever the reader is
busy.

Either side can end the other: a producer that fails hands its error to the consumer (`get` raises it), a consumer
that gives up (`stop`) makes the producer's next `write` raise BrokenPipeError instead of blocking for ever.
"""

from __future__ import annotations

import asyncio
import queue
import threading

_END = object()
_POLL_S = 0.2  # how often a blocked side looks whether the other one has stopped


class PartQueue:
    """`write` (producer thread) and `close` at its end; `get` (consumer, async) and `stop` when it gives up."""

    def __init__(self, part: int, ahead: int) -> None:
        self._part = part
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, ahead))
        self._stopped = threading.Event()
        self.size = 0  # bytes written so far

    # -- producer side --------------------------------------------------------------------------------------------

    def write(self, data) -> int:
        if self._stopped.is_set():
            raise BrokenPipeError("the upload has stopped")
        n = len(data)
        if n:
            # The writer may reuse its buffer once write returns: keep a bytes object of our own.
            self._pending.append(data if isinstance(data, bytes) else bytes(data))
            self._pending_size += n
        while self._pending_size >= self._part:
            joined = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            chunk, rest = (joined, b"") if len(joined) == self._part else (joined[:self._part], joined[self._part:])
            self._put(chunk)
            self._pending = [rest] if rest else []
            self._pending_size = len(rest)
        self.size += n
        return n

    def close(self, error: BaseException | None = None) -> None:
        """The producer's end: the last (short) part and the end mark, or its error (nothing more is sent)."""
        try:
            if error is None and self._pending:
                self._put(b"".join(self._pending))
            self._pending = []
            self._put(_END if error is None else error)
        except BrokenPipeError:
            pass  # the consumer has stopped: nobody is waiting for the end

    def _put(self, item) -> None:
        while True:
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                if self._stopped.is_set():
                    raise BrokenPipeError("the upload has stopped") from None

    # -- consumer side --------------------------------------------------------------------------------------------

    async def get(self) -> bytes | None:
        """The next part (exactly `part` bytes but the last), None at the end; raises the producer's error."""
        item = await asyncio.to_thread(self._get)
        if item is _END:
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def _get(self):
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if self._stopped.is_set():
                    return _END

    def stop(self) -> None:
        self._stopped.set()


__all__ = ["PartQueue"]

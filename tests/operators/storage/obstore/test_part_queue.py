"""storage.obstore.part_queue: a producer thread's writes as upload parts for an event loop, bounded, and stoppable."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from operators.storage.obstore.part_queue import PartQueue


def drain(parts_queue: PartQueue) -> list[bytes]:
    async def run() -> list[bytes]:
        got = []
        while (chunk := await parts_queue.get()) is not None:
            got.append(chunk)
        return got

    return asyncio.run(run())


def test_writes_of_any_size_come_out_as_whole_parts_and_a_short_last_one():
    data = os.urandom(10_000)
    parts_queue = PartQueue(part=1024, ahead=2)

    def produce() -> None:
        for start in range(0, len(data), 700):  # writes that straddle parts
            parts_queue.write(memoryview(data)[start:start + 700])
        parts_queue.close()

    threading.Thread(target=produce, daemon=True).start()
    parts = drain(parts_queue)

    assert [len(p) for p in parts] == [1024] * 9 + [784]
    assert b"".join(parts) == data and parts_queue.size == len(data)


def test_the_producer_waits_once_the_parts_ahead_are_full():
    parts_queue = PartQueue(part=100, ahead=2)
    written = []

    def produce() -> None:
        for _ in range(10):
            parts_queue.write(b"x" * 100)
            written.append(1)
        parts_queue.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    producer.join(1.0)  # a hang guard: the producer must be blocked, not finished

    assert producer.is_alive() and len(written) <= 3  # two parts queued, the third write waiting to queue
    assert len(drain(parts_queue)) == 10


def test_a_consumer_that_stops_makes_the_producer_fail_instead_of_waiting():
    parts_queue = PartQueue(part=100, ahead=1)
    errors = []

    def produce() -> None:
        try:
            for _ in range(1000):
                parts_queue.write(b"x" * 100)
        except BrokenPipeError as err:
            errors.append(err)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    parts_queue.stop()
    producer.join(10)

    assert not producer.is_alive() and errors


def test_the_producers_error_reaches_the_consumer():
    parts_queue = PartQueue(part=100, ahead=2)
    parts_queue.write(b"y" * 150)
    parts_queue.close(OSError(28, "No space left on device"))

    with pytest.raises(OSError, match="No space left"):
        drain(parts_queue)

"""TransferProgress: a bounded number of informative lines, whatever the number of objects."""

from __future__ import annotations

import logging

from operators.storage.progress import TransferProgress, format_bytes, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ten_thousand_objects_give_a_handful_of_lines(caplog):
    clock = FakeClock()
    logger = logging.getLogger("test.progress")
    caplog.set_level(logging.INFO, logger="test.progress")
    progress = TransferProgress(
        "download s3://b/data/ -> /ws", 10_000 * 1024, 10_000, interval=5.0, logger=logger, clock=clock
    )
    progress.start()
    for _ in range(10_000):
        clock.now += 0.003  # 30 s in all
        progress.add_bytes(1024)
        progress.add_file()
    progress.finish()
    progress.finish()  # idempotent

    lines = [r.getMessage() for r in caplog.records]
    assert 6 <= len(lines) <= 9  # start + one per 5 s + done
    assert lines[0] == "download s3://b/data/ -> /ws: starting (10000 files, 9.8 MiB)"
    middle = lines[1]
    assert "of 9.8 MiB" in middle and "of 10000 files" in middle and "KiB/s" in middle and "ETA" in middle
    assert lines[-1].startswith("download s3://b/data/ -> /ws: done, 10000 files, 9.8 MiB in 30s (")


def test_unknown_totals_and_retried_bytes(caplog):
    clock = FakeClock()
    logger = logging.getLogger("test.progress2")
    caplog.set_level(logging.INFO, logger="test.progress2")
    progress = TransferProgress("upload", interval=1.0, logger=logger, clock=clock)
    progress.add_bytes(5000)
    progress.add_bytes(-1000)  # s3transfer rewinds a retried part
    clock.now += 2
    progress.add_bytes(0)
    assert progress.bytes_done == 4000
    assert caplog.records[-1].getMessage() == "upload: 3.9 KiB, 0 files, 2.0 KiB/s"


def test_formatting_helpers():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 1024**3) == "3.0 GiB"
    assert format_duration(59) == "59s"
    assert format_duration(75) == "1m15s"
    assert format_duration(7260) == "2h01m"

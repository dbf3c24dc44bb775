"""The job root's disk cap: the spec's resources.disk within the admin's job_disk_limit, and the watch that stops a
job whose job root outgrows it (operators/launch/disk_cap.py)."""

from __future__ import annotations

import os
import threading

import pytest

from operators.jobspec.errors import SpecError
from operators.launch.disk_cap import DiskCapWatch, check_disk_request, job_disk_cap, measure

MiB = 1024 * 1024


def test_the_cap_is_the_specs_within_the_admins():
    assert job_disk_cap(None, "100Gi") == 100 * 1024**3
    assert job_disk_cap("4Mi", "100Gi") == 4 * MiB
    assert job_disk_cap(None, "") is None
    check_disk_request("4Mi", "100Gi")
    check_disk_request("1Ti", "")  # no admin cap: the spec's own is the cap
    with pytest.raises(SpecError) as err:
        check_disk_request("200Gi", "100Gi")
    assert err.value.field == "resources.disk" and "[training] job_disk_limit" in str(err.value)


def test_the_watch_calls_once_when_the_job_root_outgrows_its_cap(tmp_path):
    root = tmp_path / "job"
    root.mkdir()
    (root / "a.bin").write_bytes(os.urandom(MiB))
    assert measure(str(root), 2 * MiB) is None
    lines: list[str] = []
    called = threading.Event()
    watch = DiskCapWatch(str(root), 2 * MiB, lambda line: (lines.append(line), called.set()), every=0.05).start()
    try:
        (root / "b.bin").write_bytes(os.urandom(2 * MiB))
        assert called.wait(30)
    finally:
        watch.stop()
    [line] = lines
    assert line.startswith("the job root holds 3.0 MiB, more than its disk cap of 2.0 MiB (resources.disk")
    assert "\n" not in line and watch.over == line

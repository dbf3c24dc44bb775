"""Pid records of the local backend: only well-formed records naming this job's own launch are ever acted on."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from operators.launch.local.processes import kill_trees
from operators.state.launch_records import ours, parse_records


@pytest.mark.parametrize("text", [
    '[[1234, NaN]]', '[[1234, Infinity]]', '[[1234, -Infinity]]', '[[1, 1.0]]', '[[0, 1.0]]', '[[-5, 1.0]]',
    '[[true, 1.0]]', '[["1234", 1.0]]', '[[1234, "1.0"]]', '[[1234]]', '{"1234": 1.0}', 'not json',
    '[[1234, 1.0], [5678, NaN]]',  # one bad entry spoils the file: never a partial list
])
def test_malformed_records_are_refused_whole(text):
    assert parse_records(text) == []


def test_a_record_names_our_process_only_with_its_create_time_and_job_root(tmp_path):
    root = tmp_path / "job"
    root.mkdir()
    launched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--root", str(root)])
    other = subprocess.Popen(["sleep", "60"])
    try:
        ctime = psutil.Process(launched.pid).create_time()
        assert parse_records(f"[[{launched.pid}, {ctime}]]") == [(launched.pid, ctime)]
        assert ours(launched.pid, ctime, str(root)) is not None
        assert ours(launched.pid, ctime + 5, str(root)) is None  # a recycled pid
        assert ours(launched.pid, ctime, str(tmp_path / "other-job")) is None
        assert ours(other.pid, psutil.Process(other.pid).create_time(), str(root)) is None  # not a launch at all
        kill_trees([ours(launched.pid, ctime, str(root))], grace=5)
        assert launched.wait(10) is not None and other.poll() is None
    finally:
        for proc in (launched, other):
            proc.kill()
            proc.wait()

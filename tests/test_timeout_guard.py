"""The test harness's time limits (tests/timeout_guard.py) and crash handling (tests/xdist_scheduling.py), run as
`make test` runs them: pytest with xdist workers, on a module whose session fixture starts a server process."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import subprocess, sys
import pytest
sys.path.insert(0, {str(TESTS)!r})
from xdist_scheduling import pytest_xdist_make_scheduler
from timeout_guard import (pytest_runtest_makereport, pytest_runtest_teardown, pytest_timeout_cancel_timer,
                           pytest_timeout_set_timer, pytest_unconfigure)

@pytest.fixture(scope="session")
def server(tmp_path_factory):
    process = subprocess.Popen(["sleep", "{{marker}}"], start_new_session=True)
    yield process.pid
    process.kill()
"""

TESTS_MODULE = """
import subprocess, time
import pytest

@pytest.mark.timeout(3)
def test_a_polling_loop_that_never_ends(server):
    with open("first-server", "w") as out:
        out.write(str(server))
    while True:
        try:
            time.sleep(0.2)
        except ValueError:
            pass

def test_the_same_worker_goes_on(server):
    assert open("first-server").read() == str(server)

@pytest.mark.timeout(3)
def test_blocked_where_python_cannot_interrupt_it(server):
    subprocess.run(["sleep", "600"])

def test_a_new_worker_takes_the_rest(server):
    pass
"""


def test_a_timed_out_test_fails_alone_and_a_stuck_worker_leaves_no_process_and_is_not_rerun(tmp_path):
    marker = f"{1000 + uuid.uuid4().int % 1000}.{os.getpid()}"  # a unique `sleep` argument to find the servers by
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout_method = thread\n")
    (tmp_path / "conftest.py").write_text(CONFTEST.replace("{marker}", marker))
    (tmp_path / "test_probe.py").write_text(TESTS_MODULE)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "--dist", "loadscope", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--junitxml={tmp_path / 'report.xml'}", "test_probe.py"],
        cwd=tmp_path, env={**os.environ, "TEST_TIMEOUT_GRACE": "3"}, capture_output=True, text=True, timeout=120)
    output = run.stdout + run.stderr
    outcomes = {}
    for case in ET.parse(tmp_path / "report.xml").getroot().iter("testcase"):
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        outcomes[case.get("name")] = (failure.get("message") if failure is not None else "passed")
    assert outcomes.keys() == {"test_a_polling_loop_that_never_ends", "test_the_same_worker_goes_on",
                               "test_blocked_where_python_cannot_interrupt_it", "test_a_new_worker_takes_the_rest"}, \
        output  # each test once: the crashed one is not run again
    assert "ran past its time limit of 3s" in outcomes["test_a_polling_loop_that_never_ends"], output
    assert outcomes["test_the_same_worker_goes_on"] == "passed", output
    assert "crashed while running" in outcomes["test_blocked_where_python_cannot_interrupt_it"], output
    assert outcomes["test_a_new_worker_takes_the_rest"] == "passed", output
    assert "test_blocked_where_python_cannot_interrupt_it did not stop 3s after it was interrupted" in output
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]
    assert not left, f"the session fixture's server outlived its worker: {left}"

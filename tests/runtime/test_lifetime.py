"""train's own time limit and its death with its launcher: no training outlives a killed Airflow worker."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

_TRAIN = Path(sys.executable).with_name("train")
TRAIN_COMMAND = [str(_TRAIN)] if _TRAIN.exists() else [sys.executable, "-m", "training_runtime"]


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("TRAINING_")}

# The user code starts a grandchild (a shell's background job would do the same) and records both pids.
SLEEPER = """\
import os, subprocess, sys, time
root = os.environ["TRAINING_ROOT"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(os.path.join(root, "pids"), "w") as f:
    f.write("%d %d" % (os.getpid(), child.pid))
print("sleeping", flush=True)
time.sleep(300)
"""


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, "timed out waiting for %s" % path
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # it may exit between the lookup and the read of its status
        return False


def _gone(pids, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_running(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_train_stops_the_user_code_at_max_run_seconds_itself(make_job):
    job = make_job(code={"train.py": SLEEPER})
    started = time.monotonic()
    result = job.run("--max-run-seconds", "2", timeout=60)
    took = time.monotonic() - started
    assert result.returncode == 5, result.stderr
    assert took < 20, took  # 2 s + the user code's start, SIGTERM honoured at once
    assert "max_run_seconds=2" in job.failure
    script_pid, grandchild_pid = map(int, (job.root / "pids").read_text().split())
    assert _gone([script_pid, grandchild_pid], 5)


def test_the_limit_comes_from_the_environment_too(make_job):
    job = make_job(code={"train.py": "import time; time.sleep(60)\n"})
    result = job.run(env={"TRAINING_MAX_RUN_SECONDS": "1"}, timeout=60)
    assert result.returncode == 5 and "max_run_seconds=1" in job.failure


def test_a_bad_limit_is_refused_as_an_invalid_job(make_job):
    job = make_job()
    result = job.run("--max-run-seconds", "soon")
    assert result.returncode == 2 and "max run seconds must be a number" in job.failure


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_of_the_launching_process_takes_the_training_down(make_job):
    # A launcher of our own stands in for the Airflow worker: it starts train and waits; we SIGKILL it.
    job = make_job(code={"train.py": SLEEPER})
    launcher = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True).wait()",
         *TRAIN_COMMAND, "--root", str(job.root), "--die-with-parent"],
        env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(job.root / "pids")
        train_pid = psutil.Process(launcher.pid).children()[0].pid
        script_pid, grandchild_pid = map(int, (job.root / "pids").read_text().split())
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
        assert _gone([train_pid, script_pid, grandchild_pid], 20), "the training outlived its launcher"
        assert "training was stopped" in job.failure  # SIGTERM: train recorded why before it went
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_train_stops_itself_once_its_lease_goes_unrenewed(make_job, tmp_path):
    # A launcher that may be replaced (the local backend's task retry) renews a lease instead of being train's
    # parent for life; nobody renews this one.
    job = make_job(code={"train.py": SLEEPER})
    lease = tmp_path / "lease"
    lease.touch()
    started = time.monotonic()
    result = job.run("--lease", str(lease), "--lease-seconds", "2", "--exit-file", str(tmp_path / "exit"), timeout=60)
    assert time.monotonic() - started < 30
    assert result.returncode != 0 and "stopped renewing its lease" in result.stderr
    assert "training was stopped" in job.failure
    script_pid, grandchild_pid = map(int, (job.root / "pids").read_text().split())
    assert _gone([script_pid, grandchild_pid], 5)
    assert (tmp_path / "exit").read_text().strip() == str(result.returncode)  # for a launcher that reattached


def test_a_renewed_lease_keeps_the_training_running(make_job, tmp_path):
    job = make_job(code={"train.py": "import time; time.sleep(4)\n"})
    lease = tmp_path / "lease"
    lease.touch()
    renewing = subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                                 "while True: os.utime(sys.argv[1]); time.sleep(0.3)", str(lease)])
    try:
        result = job.run("--lease", str(lease), "--lease-seconds", "1.5", "--exit-file", str(tmp_path / "exit"))
    finally:
        renewing.kill()
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "exit").read_text().strip() == "0"

"""The user process: live output, signal forwarding, nothing left behind."""

import signal
import time
from pathlib import Path

import pytest


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "timed out waiting for %s" % path
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open("/proc/%d/status" % pid) as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def test_output_is_streamed_while_the_user_code_runs(make_job):
    # The script prints, then waits for the test to answer: the line must reach
    # the test before the script ends (no buffering until exit).
    script = (
        "import os, sys, time\n"
        "print('epoch 1 loss 0.5')\n"
        "print('warning: slow disk', file=sys.stderr)\n"
        "go = os.path.join(os.environ['TRAINING_ROOT'], 'go')\n"
        "deadline = time.time() + 20\n"
        "while not os.path.exists(go) and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
        "sys.exit(0 if os.path.exists(go) else 9)\n"
    )
    job = make_job(code={"train.py": script})
    proc = job.start()
    started = time.monotonic()
    assert proc.stdout.readline() == "epoch 1 loss 0.5\n"
    assert time.monotonic() - started < 15
    (job.root / "go").touch()
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "warning: slow disk" in stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_train_reaches_the_whole_user_process_tree(make_job, signum):
    # A command whose real work runs in a grandchild of train (bash -> python).
    worker = (
        "import os, signal, sys, time\n"
        "root = os.environ['TRAINING_ROOT']\n"
        "def stop(signum, frame):\n"
        "    open(os.path.join(root, 'got-%d' % signum), 'w').close()\n"
        "    print('saving checkpoint before exit', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "open(os.path.join(root, 'ready'), 'w').close()\n"
        "time.sleep(60)\n"
    )
    job = make_job(entry_point=None, command="python worker.py; echo done", code={"worker.py": worker})
    proc = job.start()
    _wait_for(job.root / "ready")

    proc.send_signal(signum)  # to train only, as Kubernetes / the local launcher would
    stdout, stderr = proc.communicate(timeout=30)

    assert (job.root / ("got-%d" % signum)).exists(), stderr
    assert "saving checkpoint before exit" in stdout
    assert proc.returncode == 128 + signum
    assert "training was stopped: train received %s" % signal.Signals(signum).name in job.failure
    assert not job.succeeded


def test_processes_left_behind_do_not_hang_train(make_job):
    job = make_job(entry_point=None, command='sleep 300 & echo $! > "$TRAINING_ROOT/bg.pid"; echo started')
    started = time.monotonic()
    result = job.run(timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 20
    pid = int((job.root / "bg.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert "left processes running" in result.stderr


def test_user_code_gets_no_stdin(make_job):
    job = make_job(code={"train.py": "import sys\nassert sys.stdin.read() == ''\n"})
    result = job.run()
    assert result.returncode == 0, result.stderr

"""output/success and output/failure as the upload stage and the user see them."""

import os
import time
from pathlib import Path

FAILING_SCRIPT = """\
import sys
print("training started", flush=True)
for i in range(1, 61):
    print("err-%02d" % i, file=sys.stderr)
sys.exit(3)
"""


def test_failing_script_gives_exit_code_1_and_its_stderr_tail(make_job):
    job = make_job(code={"train.py": FAILING_SCRIPT})
    result = job.run()

    assert result.returncode == 1
    assert "training started" in result.stdout  # the user's output is passed through
    assert "err-60" in result.stderr
    failure = job.failure
    assert failure.startswith("the user code (entry point train.py) failed with exit code 3")
    assert "err-60" in failure and "err-11" in failure
    assert "err-10" not in failure  # only the last 50 lines
    assert not job.succeeded


def test_python_traceback_is_the_failure_reason(make_job):
    job = make_job(code={"train.py": "raise ValueError('learning rate must be positive')\n"})
    assert job.run().returncode == 1
    assert "ValueError: learning rate must be positive" in job.failure
    assert "exit code 1" in job.failure


def test_failure_written_by_the_user_is_kept(make_job):
    script = (
        "import os, sys\n"
        "open(os.path.join(os.environ['TRAINING_ROOT'], 'output', 'failure'), 'w').write('dataset is empty\\n')\n"
        "print('noise', file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    job = make_job(code={"train.py": script})
    assert job.run().returncode == 1
    assert job.failure == "dataset is empty\n"


def test_success_file_and_stale_files_of_an_earlier_attempt(make_job):
    job = make_job()
    for path in (job.layout.failure_file, job.layout.success_file):
        Path(path).write_text("old attempt\n")
        past = time.time() - 3600
        os.utime(path, (past, past))

    result = job.run()

    assert result.returncode == 0, result.stderr
    assert Path(job.layout.success_file).read_text() == "success"  # as ti-containers writes it
    assert job.failure is None


def test_a_later_failure_replaces_an_earlier_success(make_job):
    job = make_job(code={"train.py": "import sys; sys.exit(5)\n"})
    Path(job.layout.success_file).write_text("success\n")
    past = time.time() - 60
    os.utime(job.layout.success_file, (past, past))
    assert job.run().returncode == 1
    assert not job.succeeded
    assert "exit code 5" in job.failure


def test_killed_user_code_says_which_signal(make_job):
    # SIGKILL is the OOM class (test_memory.py); another fatal signal is the user's.
    job = make_job(code={"train.py": "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)\n"})
    assert job.run().returncode == 1
    assert "exit code 134 (killed by SIGABRT)" in job.failure


def test_one_failing_host_fails_the_shared_root(make_job):
    # Local mode: both hosts' `train` share one root and run at the same time.
    script = (
        "import os, sys, time\n"
        "root = os.environ['TRAINING_ROOT']\n"
        "if os.environ['TRAINING_CURRENT_HOST'] == 'algo-2':\n"
        "    sys.exit('algo-2 lost its data')\n"
        "open(os.path.join(root, 'algo-1-running'), 'w').close()\n"
        "while not os.path.exists(os.path.join(root, 'output', 'failure')):\n"
        "    time.sleep(0.05)\n"
    )
    job = make_job(hosts=["algo-1", "algo-2"], code={"train.py": script})
    first = job.start("--current-host", "algo-1")
    deadline = time.monotonic() + 30
    while not (job.root / "algo-1-running").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.run("--current-host", "algo-2").returncode == 1
    first.communicate(timeout=30)
    assert first.returncode == 0
    # algo-1 succeeded after algo-2 failed: the failure stays, no success is claimed.
    assert "algo-2 lost its data" in job.failure
    assert not job.succeeded


def test_huge_stderr_is_capped_in_the_failure_file(make_job):
    script = "import sys\nfor i in range(60):\n    print('x' * 5000, file=sys.stderr)\nsys.exit(1)\n"
    job = make_job(code={"train.py": script})
    assert job.run().returncode == 1
    assert len(job.failure.encode()) <= 17 * 1024
    assert job.failure.startswith("the user code")


def test_a_peer_that_failed_before_this_host_started_keeps_its_failure(make_job):
    # Two hosts share the root; algo-2 failed (and wrote output/failure) before algo-1's `train` started.
    # That failure is this attempt's, not a stale one: algo-1 must not delete it and claim another reason.
    job = make_job(hosts=["algo-1", "algo-2"], code={"train.py": "import sys; sys.exit('should not matter')\n"})
    Path(job.layout.failure_file).write_text("algo-2 lost its data\n")
    past = time.time() - 5
    os.utime(job.layout.failure_file, (past, past))
    assert job.run("--current-host", "algo-1", "--host-wait", "0").returncode == 1
    assert job.failure.startswith("algo-2 lost its data")
    assert not job.succeeded


def test_two_hosts_with_the_same_pid_finishing_at_once_both_write_success(tmp_path, monkeypatch):
    """Each host has its own pid namespace, so both hosts' `train` can be pid 2: their private file names must not
    depend on the pid (one host renamed the other's file away, and a job whose training succeeded failed)."""
    from training_runtime import outcome
    from training_runtime.layouts import layout_for

    layout = layout_for("ti", str(tmp_path))
    monkeypatch.setattr(os, "getpid", lambda: 2)
    replace = os.replace
    peers = []

    def replace_after_the_peer_finishes(src, dst):
        if not peers:  # the other host writes its success file between this host's write and rename
            peers.append(src)
            outcome.write_success(layout, "ti")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_after_the_peer_finishes)
    outcome.write_success(layout, "ti")
    assert Path(layout.success_file).read_text() == "success"
    assert sorted(p.name for p in Path(layout.output_dir).iterdir()) == ["success"]  # no private file left


def test_the_cause_replaces_a_peer_s_broken_group_failure_but_never_the_reverse(tmp_path):
    """Two elastic hosts share the job root: host 1's script fails and its agent takes the rendezvous store down;
    on a busy machine host 2 can write "the elastic group could not go on" first. The job's reason is the script's
    error, whichever lands first; a second broken-group line never replaces a cause."""
    from training_runtime import outcome
    from training_runtime.layouts import layout_for

    layout = layout_for("sagemaker", str(tmp_path))
    outcome.write_failure(layout, outcome.GROUP_BROKE_UP + " (torchrun exit code 1): its rendezvous is gone")
    outcome.write_failure(layout, "the user code (entry point train.py) failed with exit code 1: ValueError: lr")
    assert Path(layout.failure_file).read_text().startswith("the user code (entry point train.py) failed")
    outcome.write_failure(layout, outcome.GROUP_BROKE_UP + " (torchrun exit code 1): its rendezvous is gone")
    outcome.write_failure(layout, "algo-3 failed too")
    assert Path(layout.failure_file).read_text().startswith("the user code (entry point train.py) failed")

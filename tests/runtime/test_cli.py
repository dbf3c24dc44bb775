"""The `train` command line, `python -m training_runtime`, and the package's promises."""

import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import training_runtime

PACKAGE_PARENT = str(Path(training_runtime.__file__).resolve().parents[1])


def test_python_dash_m_is_train(make_job):
    job = make_job(hyperparameters={"epochs": 1})
    result = subprocess.run(
        [sys.executable, "-m", "training_runtime", "--root", str(job.root)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert job.seen()["argv"] == ["--epochs", "1"]


def test_check_validates_and_runs_nothing(make_job):
    code = {"train.py": "open('RAN', 'w')\n", "requirements.txt": "nothing-xyz\n"}
    job = make_job(hyperparameters={"epochs": 1}, code=code)
    result = job.run("--check")
    assert result.returncode == 0, result.stderr
    assert "the job is valid; it would run:" in result.stderr and "train.py --epochs 1" in result.stderr
    assert not Path(job.layout.code_dir, "RAN").exists()
    assert not job.succeeded and job.failure is None
    assert not (job.root / ".venv-job").exists()


def test_check_refuses_an_invalid_job(make_job):
    job = make_job(entry_point="missing.py")
    result = job.run("--check")
    assert result.returncode == 2
    assert "entry point 'missing.py'" in result.stderr


def test_help_lists_the_flags_and_exit_codes():
    result = subprocess.run([sys.executable, "-m", "training_runtime", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for fragment in ("--root", "--current-host", "--layout", "--check", "3 requirements.txt install failed"):
        assert fragment in text


def test_importing_the_runtime_has_no_side_effects_and_no_airflow():
    code = (
        "import logging, sys\n"
        "import training_runtime.cli, training_runtime.trainer, training_runtime.layouts\n"
        "assert not any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules), 'airflow imported'\n"
        "assert not logging.getLogger('training_runtime').handlers, 'logging configured at import'\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert result.stdout == "ok\n", result.stderr


def _python39():
    candidates = glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9"))
    candidates += glob.glob("/usr/bin/python3.9") + glob.glob("/usr/local/bin/python3.9")
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.skipif(_python39() is None, reason="no Python 3.9 interpreter on this machine")
def test_runs_on_python_3_9_with_the_standard_library_only(make_job):
    job = make_job(distribution="pytorch", hyperparameters={"epochs": 1})
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT, PYTHONNOUSERSITE="1")
    result = subprocess.run(
        [_python39(), "-S", "-m", "training_runtime", "--root", str(job.root)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert job.seen()["executable"].endswith("python3.9")


def _run_with_variables(job, content: bytes, env: dict | None = None) -> tuple[int, str, str]:
    """`train` with `content` on the descriptor --environment-fd names; (exit code, stderr, what the descriptor
    shows in /proc/<pid>/fd)."""
    read, write = os.pipe()
    os.write(write, content)
    os.close(write)
    try:
        proc = job.start("--environment-fd", str(read), env=env, pass_fds=(read,))
        _, stderr = proc.communicate(timeout=60)
        return proc.returncode, stderr, f"pipe:[{os.fstat(read).st_ino}]"
    finally:
        os.close(read)


def test_the_jobs_variables_come_from_a_descriptor_that_the_user_code_never_inherits(make_job, record_script):
    # A launcher whose privileged processes start train (the local sandbox) hands the job's variables over this way,
    # not in the environment: they reach the user code, and its descriptor does not.
    job = make_job(code={"train.py": record_script + textwrap.dedent("""
        seen["fds"] = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                seen["fds"].append(os.readlink("/proc/self/fd/" + fd))
            except OSError:
                pass
        with open(out, "w") as f:
            json.dump(seen, f)
    """)})
    variables = {"GREETING": "hi there", "LD_PRELOAD": "", "HOME": "/somewhere"}
    code, stderr, descriptor = _run_with_variables(job, json.dumps(variables).encode(), env={"HOME": "/platform-home"})
    assert code == 0, stderr
    seen = job.seen()
    assert seen["env"]["GREETING"] == "hi there" and seen["env"]["LD_PRELOAD"] == ""
    assert seen["env"]["HOME"] == "/somewhere"  # the job's value over the launcher's, as in the environment before
    assert descriptor not in seen["fds"], seen["fds"]


def test_an_unreadable_variables_descriptor_is_a_platform_error_and_runs_nothing(make_job):
    job = make_job(code={"train.py": "open('RAN', 'w')\n"})
    code, stderr, _ = _run_with_variables(job, b'["not", "an", "object"]')
    assert code == 4 and "cannot read the job's environment" in stderr, stderr
    assert not Path(job.layout.code_dir, "RAN").exists()

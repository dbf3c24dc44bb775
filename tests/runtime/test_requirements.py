"""code/requirements.txt: installed for the job, never into the Python that runs `train`."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

MYPKG_PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "runtime-test-mypkg"
version = "0.1"
"""

USES_MYPKG = """\
import json, os, sys
import runtime_test_mypkg
import training_runtime  # from the environment that runs train: still visible
with open(os.path.join(os.environ["TM_MODEL_DIR"], "result.json"), "w") as f:
    json.dump({"answer": runtime_test_mypkg.ANSWER, "executable": sys.executable}, f)
"""


def test_local_package_is_installed_into_a_job_environment_only(make_job):
    job = make_job(code={
        "train.py": USES_MYPKG,
        "requirements.txt": "./mypkg\n",
        "mypkg/pyproject.toml": MYPKG_PYPROJECT,
        "mypkg/src/runtime_test_mypkg/__init__.py": "ANSWER = 42\n",
    })

    result = job.run(timeout=300)

    assert result.returncode == 0, result.stderr
    seen = json.loads(Path(job.layout.model_dir, "result.json").read_text())
    assert seen["answer"] == 42
    assert Path(seen["executable"]).parent == job.root / ".venv-job" / "bin"
    assert "Successfully installed runtime-test-mypkg-0.1" in result.stderr  # pip's output is in the log
    # The interpreter that runs `train` (here: the Airflow venv) did not get it.
    probe = subprocess.run([sys.executable, "-c", "import runtime_test_mypkg"], capture_output=True)
    assert probe.returncode != 0
    listing = subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True, text=True).stdout
    assert "runtime-test-mypkg" not in listing

    # A second attempt on the same root reuses the environment.
    again = job.run(timeout=120)
    assert again.returncode == 0, again.stderr
    assert "reusing the environment" in again.stderr


def test_failed_install_is_exit_code_3_with_pips_last_lines(make_job):
    job = make_job(code={"train.py": "open('RAN', 'w')\n", "requirements.txt": "./no-such-directory\n"})
    result = job.run(timeout=120)
    assert result.returncode == 3, result.stderr
    assert job.failure.startswith("pip install -r requirements.txt failed with exit code")
    assert "no-such-directory" in job.failure  # pip's own explanation
    assert not Path(job.layout.code_dir, "RAN").exists()


def test_shared_cache_is_reused_across_jobs(make_job, tmp_path):
    cache = tmp_path / "pip-cache"
    # Already satisfied by the runtime's environment: pip needs no network.
    code = {
        "train.py": "import sys, os\nopen(os.path.join(os.environ['TM_MODEL_DIR'], 'py'), 'w').write(sys.executable)\n",
        "requirements.txt": "pytest\n",
    }
    first, second = make_job(code=code), make_job(code=code)
    env = {"TRAINING_PIP_CACHE": str(cache)}
    assert first.run(env=env, timeout=120).returncode == 0
    result = second.run(env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "reusing the environment" in result.stderr
    python = Path(Path(second.layout.model_dir, "py").read_text())
    assert python == Path(Path(first.layout.model_dir, "py").read_text())
    assert cache in python.parents
    assert not (second.root / ".venv-job").exists()


def test_hosts_sharing_a_root_install_once(make_job):
    code = {"train.py": "", "requirements.txt": "pytest\n"}
    job = make_job(hosts=["algo-1", "algo-2"], code=code)
    procs = [job.start("--current-host", host) for host in ("algo-1", "algo-2")]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    installs = sum(stderr.count("[train] installing ") for _, stderr in outputs)
    reuses = sum(stderr.count("reusing the environment") for _, stderr in outputs)
    assert (installs, reuses) == (1, 1)


SLOW_BACKEND = """\
import os, time
def get_requires_for_build_wheel(config_settings=None):
    open(os.path.join(os.environ["TRAINING_TEST_MARKS"], "building"), "w").close()
    time.sleep(120)
    return []
"""


def test_stop_signal_during_install_stops_pip_and_is_recorded(make_job, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    job = make_job(code={
        "train.py": "open('RAN', 'w')\n",
        "requirements.txt": "./slowpkg\n",
        "slowpkg/pyproject.toml": (
            '[build-system]\nrequires = []\nbuild-backend = "slow_backend"\nbackend-path = ["."]\n'
        ),
        "slowpkg/slow_backend.py": SLOW_BACKEND,
    })
    proc = job.start(env={"TRAINING_TEST_MARKS": str(marks)})
    deadline = time.monotonic() + 60
    while not (marks / "building").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "train received SIGTERM while installing requirements.txt" in job.failure
    assert not Path(job.layout.code_dir, "RAN").exists()


PIP_AT_RUN_TIME = """\
import json, os, subprocess, sys
subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "./mypkg"], check=True)
import runtime_test_mypkg
with open(os.path.join(os.environ["TM_MODEL_DIR"], "result.json"), "w") as f:
    json.dump({"prefix": sys.prefix, "answer": runtime_test_mypkg.ANSWER}, f)
"""


def test_job_venv_keeps_run_time_pip_installs_away_from_the_runtime(make_job):
    # Local mode sets TRAINING_JOB_VENV=1: even without requirements.txt the user
    # code gets its own environment, so its own `pip install` cannot reach Airflow's.
    job = make_job(code={
        "train.py": PIP_AT_RUN_TIME,
        "mypkg/pyproject.toml": MYPKG_PYPROJECT,
        "mypkg/src/runtime_test_mypkg/__init__.py": "ANSWER = 7\n",
    })
    result = job.run(env={"TRAINING_JOB_VENV": "1"}, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(Path(job.layout.model_dir, "result.json").read_text())
    assert seen == {"prefix": str(job.root / ".venv-job"), "answer": 7}
    probe = subprocess.run([sys.executable, "-c", "import runtime_test_mypkg"], capture_output=True)
    assert probe.returncode != 0


def test_the_job_environment_is_made_without_starting_an_interpreter(tmp_path, monkeypatch):
    # `python -m venv`, then asking the new python for its site-packages and for pip, were three interpreter starts
    # (~0.3-0.6 s of every local job's start); the runtime's own interpreter makes the same environment in-process.
    from training_runtime import requirements

    started = []
    monkeypatch.setattr(requirements.subprocess, "run", lambda argv, *a, **k: started.append(argv))
    venv = tmp_path / ".venv-job"
    requirements._create_venv(str(venv), sys.executable)
    monkeypatch.undo()
    assert started == []
    assert "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text()
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys, pip, training_runtime; print(sys.prefix)"],
                           capture_output=True, text=True)  # the runtime's packages, and pip for run-time installs
    assert probe.returncode == 0 and probe.stdout.strip() == str(venv), probe.stderr

"""The local backend with the real `train` runtime as child processes on temporary job roots."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
from training_runtime.config import write_config_files
from training_runtime.layouts import create_directories, layout_for

from operators.hooks.launcher import TIMEOUT, USER_ERROR, LaunchRequest
from operators.hooks.local_launcher import PIDS_FILE, LocalLauncherHook


def make_job(tmp_path: Path, script: str, instance_count: int = 1, max_run_seconds: int | None = 60,
             distribution: str | None = None) -> LaunchRequest:
    launcher = LocalLauncherHook()
    root = tmp_path / "job"
    layout = create_directories(layout_for("ti", root))
    Path(layout.code_dir, "train.py").write_text(textwrap.dedent(script))
    hosts = launcher.hosts("job", instance_count)
    write_config_files(
        layout,
        hyperparameters={},
        resource_config={"current_host": hosts[0], "hosts": hosts},
        input_data_config={},
        job_config={"job_name": "job", "layout": "ti", "entry_point": "train.py", "distribution": distribution,
                    "host_addresses": launcher.host_addresses("job", instance_count),
                    "master_port": launcher.master_port()},
    )
    return LaunchRequest(job_name="job", job_root=str(root), workspace=str(tmp_path), layout="ti",
                         instance_count=instance_count, hosts=tuple(hosts), max_run_seconds=max_run_seconds)


def test_lines_stream_as_they_are_produced_and_success_is_reported(tmp_path):
    request = make_job(tmp_path, """
        import time
        for i in range(3):
            print(f"step {i}", flush=True)
            time.sleep(0.3)
    """)
    seen: list[tuple[float, str]] = []
    result = LocalLauncherHook().run(request, lambda line: seen.append((time.monotonic(), line)))
    assert result.succeeded and result.exit_code == 0
    steps = [(t, line) for t, line in seen if line.startswith("step")]
    assert [line for _, line in steps] == ["step 0", "step 1", "step 2"]
    assert steps[2][0] - steps[0][0] > 0.4  # streamed while running, not dumped at the end
    assert not Path(request.job_root, PIDS_FILE).exists()


def test_user_failure_carries_the_reason_and_is_not_retryable(tmp_path):
    request = make_job(tmp_path, "raise SystemExit('ValueError: bad learning rate')\n")
    result = LocalLauncherHook().run(request, lambda line: None)
    assert not result.succeeded and result.exit_code == 1 and result.failure_class == USER_ERROR
    assert "bad learning rate" in result.failure_reason and not result.retryable


def _processes_with(token: str) -> list:
    """Live processes whose command line holds `token` (pids inside the sandbox are not the host's)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if token in " ".join(proc.info["cmdline"] or ()) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _live(procs) -> list:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_max_run_seconds_stops_the_whole_process_tree(tmp_path):
    token = f"grandchild-{tmp_path.name}"
    request = make_job(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", {token!r}])
        print("sleeping", flush=True)
        time.sleep(600)
    """, max_run_seconds=3)
    started = time.monotonic()
    result = LocalLauncherHook().run(request, lambda line: None)
    assert time.monotonic() - started < 30
    assert result.failure_class == TIMEOUT and "max_run_seconds=3" in result.failure_reason
    assert result.exit_code == 5  # train stopped it itself, not the launcher's safety net
    assert not _processes_with(token)


def test_stop_from_another_thread_kills_everything(tmp_path):
    request = make_job(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    launcher = LocalLauncherHook()
    up = threading.Event()
    results = []
    runner = threading.Thread(target=lambda: results.append(launcher.run(request, lambda l: up.set())))
    runner.start()
    assert up.wait(30)
    launcher.stop(request)  # what on_kill does when the task is marked failed or times out
    runner.join(30)
    assert not runner.is_alive() and not results[0].succeeded


def test_a_retry_kills_the_training_an_earlier_attempt_left_running(tmp_path):
    request = make_job(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    first = LocalLauncherHook()
    up = threading.Event()
    threading.Thread(target=lambda: first.run(request, lambda l: up.set()), daemon=True).start()
    assert up.wait(30)
    orphan_pids = [p.pid for p in first._procs]
    # A new attempt (a retry, or a restarted worker) with a fresh hook: it must not leave two trainings running.
    Path(request.job_root, "code", "train.py").write_text("print('second attempt')\n")
    result = LocalLauncherHook().run(request, lambda line: None)
    assert result.succeeded
    for pid in orphan_pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_one_failed_host_stops_its_waiting_peer(tmp_path, monkeypatch):
    monkeypatch.setattr("operators.hooks.local_launcher.PEER_FAILURE_GRACE_SECONDS", 1.0)
    request = make_job(tmp_path, """
        import os, sys, time
        if os.environ["TM_CURRENT_HOST"] == "algo-2":
            sys.exit("host 2 crashed")
        time.sleep(600)  # host 1 would wait for its peer forever
    """, instance_count=2)
    lines: list[str] = []
    started = time.monotonic()
    result = LocalLauncherHook().run(request, lines.append)
    assert time.monotonic() - started < 30
    assert not result.succeeded and "host 2 crashed" in result.failure_reason
    assert any(line.startswith("[algo-2] ") for line in lines)


def test_airflow_secrets_do_not_reach_user_code(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SECRET_DB", "postgres://user:hunter2@db/x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    request = make_job(tmp_path, "import os\nprint(sorted(k for k in os.environ if 'hunter2' in os.environ[k]))\n")
    lines: list[str] = []
    assert LocalLauncherHook().run(request, lines.append).succeeded
    assert "[]" in lines and not any("hunter2" in line for line in lines)


HOSTILE = """
    import glob, os
    found = []
    targets = [os.path.join(os.environ.get("AIRFLOW_HOME_GUESS", "/nonexistent"), name)
               for name in ("airflow.cfg", "airflow.db", "airflow-secrets.env")]
    targets += [os.path.join("../" * depth, name) for depth in range(1, 8)
                for name in ("airflow.cfg", "airflow.db", "airflow-secrets.env")]
    targets += glob.glob("/proc/*/environ")  # the worker's environment, if its pid is visible
    for path in targets:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            continue
        if b"hunter2" in data:
            found.append(path)
    for key, value in os.environ.items():
        if "hunter2" in value:
            found.append("env:" + key)
    print("LEAKED", found, flush=True)
"""


def test_a_hostile_script_cannot_read_airflow_secrets(tmp_path, monkeypatch):
    home = tmp_path / "airflow-home"
    home.mkdir()
    for name in ("airflow.cfg", "airflow.db", "airflow-secrets.env"):
        (home / name).write_text("password = hunter2\n")
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    for name in ("AIRFLOW_CONN_SECRET_DB", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "AZURE_CLIENT_SECRET", "SOME_NEW_KEY"):
        monkeypatch.setenv(name, "hunter2")
    # The job root where the default workspace puts it: inside AIRFLOW_HOME.
    request = make_job(home / "workspace", HOSTILE)
    request = LaunchRequest(**{**request.__dict__, "env": {"AIRFLOW_HOME_GUESS": str(home)}})
    lines: list[str] = []
    assert LocalLauncherHook(sandbox="bubblewrap").run(request, lines.append).succeeded, lines
    assert "LEAKED []" in lines, lines
    # The same script unsandboxed proves it would find them: the test can fail.
    lines.clear()
    assert LocalLauncherHook(sandbox="none").run(request, lines.append).succeeded
    leaked = next(line for line in lines if line.startswith("LEAKED"))
    assert "airflow.db" in leaked and "env:" not in leaked  # the environment is allowlisted either way


def test_kill_9_of_the_worker_leaves_no_training_running(tmp_path):
    request = make_job(tmp_path, """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("up", flush=True)
        time.sleep(600)
    """, max_run_seconds=600)
    worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        from operators.hooks.launcher import LaunchRequest
        from operators.hooks.local_launcher import LocalLauncherHook
        request = LaunchRequest.from_dict(json.loads(sys.argv[1]))
        LocalLauncherHook().run(request, lambda line: print(line, flush=True))
    """), json.dumps(request.to_dict())], stdout=subprocess.PIPE, text=True)
    try:
        for line in worker.stdout:  # the launcher's own log lines come first
            if line.strip() == "up":
                break
        tree = psutil.Process(worker.pid).children(recursive=True)
        assert len(tree) >= 3  # (bwrap,) train, the script, its child
        worker.kill()  # kill -9 of the Airflow worker
        worker.wait(10)
        deadline = time.monotonic() + 20
        while _live(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _live(tree), "the training outlived its worker"
    finally:
        if worker.poll() is None:
            worker.kill()

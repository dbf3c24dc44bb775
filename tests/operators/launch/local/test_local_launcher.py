"""The local backend with the real `train` runtime as child processes on temporary job roots."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from operators.launch.base import TIMEOUT, USER_ERROR, LaunchRequest
from operators.launch.local import launcher as local_launcher
from operators.launch.local.launcher import LocalLauncherHook
from operators.state.job_state import ensure_state_dir
from training_runtime.environment import read_job_variables
from operators.state.job_state import LAUNCH_DIR, LAUNCH_PIDS, state_path
from local_jobs import make_job


def pids_file(request: LaunchRequest) -> Path:
    return Path(state_path(request.workspace, request.job_name, LAUNCH_PIDS))


def launch_file(request: LaunchRequest, name: str) -> Path:
    return Path(state_path(request.workspace, request.job_name, LAUNCH_DIR, name))


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
    assert not pids_file(request).exists()


def test_what_the_script_printed_is_not_kept_in_the_job_root_once_reported(tmp_path):
    # A script that prints a secret: the task log gets the line (masked there by Airflow); the job root, kept for
    # resumes and retention, must not keep the raw copy the launcher tailed.
    request = make_job(tmp_path, "import base64\nprint('the token is', base64.b64decode('dG9rLTVlM2Y=').decode())\n")
    lines: list[str] = []
    result = LocalLauncherHook(lease_seconds=60).run(request, lines.append)
    assert result.succeeded and "the token is tok-5e3f" in lines
    kept = [str(f) for f in Path(request.job_root).rglob("*") if f.is_file() and b"tok-5e3f" in f.read_bytes()]
    assert kept == []


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


# A launcher in a process of its own, standing in for the task process of the Airflow worker, so it can be kill -9'd.
LAUNCHER = """
import pickle, sys
from operators.launch.local.launcher import LocalLauncherHook
request = pickle.loads(bytes.fromhex(sys.argv[1]))
LocalLauncherHook(lease_seconds=float(sys.argv[2])).run(request, lambda line: print(line, flush=True))
"""

COUNTING = """
    import os, time
    with open(os.path.join(os.environ["TRAINING_ROOT"], "starts"), "a") as f:
        f.write("started\\n")
    for step in range(STEPS):
        print(f"step {step}", flush=True)
        time.sleep(0.5)
"""


def launch_in_a_process(request, lease_seconds: float) -> subprocess.Popen:
    import pickle

    return subprocess.Popen([sys.executable, "-c", LAUNCHER, pickle.dumps(request).hex(), str(lease_seconds)],
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                            stdout=subprocess.PIPE, text=True)


def kill_launcher_once_training(launcher: subprocess.Popen, request) -> None:
    deadline = time.monotonic() + 60
    while "step 1" not in launch_file(request, "algo-1.log").read_text(errors="replace") \
            if launch_file(request, "algo-1.log").exists() else True:
        assert time.monotonic() < deadline and launcher.poll() is None, "the training did not start"
        time.sleep(0.2)
    launcher.kill()  # kill -9: no on_kill, no cleanup
    launcher.wait(10)


def test_a_retry_reattaches_to_the_training_a_killed_launcher_left_running(tmp_path):
    request = make_job(tmp_path, COUNTING.replace("STEPS", "8"))
    kill_launcher_once_training(launch_in_a_process(request, 60), request)
    pids = [pid for pid, _ in json.loads(pids_file(request).read_text())]
    assert all(psutil.pid_exists(pid) for pid in pids), "the training died with its launcher"
    # The retry: a fresh hook in another process. It must wait for that training, not start a second one.
    lines: list[str] = []
    result = LocalLauncherHook(lease_seconds=60).run(request, lines.append)
    assert result.succeeded and result.exit_code == 0
    assert Path(request.job_root, "starts").read_text().split() == ["started"], "the training started twice"
    assert [line for line in lines if line.startswith("step")] == [f"step {i}" for i in range(8)]
    assert not pids_file(request).exists()


def test_a_training_that_ended_while_nobody_watched_is_not_run_again(tmp_path):
    request = make_job(tmp_path, COUNTING.replace("STEPS", "3"))
    kill_launcher_once_training(launch_in_a_process(request, 60), request)
    status = launch_file(request, "algo-1.status")  # bubblewrap writes the exit code there
    deadline = time.monotonic() + 60
    while "exit-code" not in status.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    lines: list[str] = []
    result = LocalLauncherHook(lease_seconds=60).run(request, lines.append)
    assert result.succeeded and Path(request.job_root, "starts").read_text().split() == ["started"]
    assert "step 2" in lines


def test_a_launcher_whose_supervisor_died_leaves_the_ended_training_to_the_retry(tmp_path):
    import pickle

    request = make_job(tmp_path, COUNTING.replace("STEPS", "6"))
    # supervisor -> launcher, as the task SDK's supervisor -> task process; only the supervisor is killed
    supervisor = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()",
         sys.executable, "-c", LAUNCHER, pickle.dumps(request).hex(), "60"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, stdout=subprocess.DEVNULL)
    kill_launcher_once_training(supervisor, request)
    launcher = psutil.Process(json.loads(pids_file(request).read_text())[0][0]).parent()
    launcher.wait(60)  # it watched the training to its end, with nobody left to report to
    assert pids_file(request).exists(), "the launcher forgot a training whose result nobody reported"
    result = LocalLauncherHook(lease_seconds=60).run(request, lambda line: None)
    assert result.succeeded and Path(request.job_root, "starts").read_text().split() == ["started"]


def test_a_reattached_failure_is_reported_with_its_exit_code_and_reason(tmp_path):
    request = make_job(tmp_path, textwrap.dedent(COUNTING.replace("STEPS", "4"))
                       + "raise SystemExit('bad data in shard 3')\n")
    kill_launcher_once_training(launch_in_a_process(request, 60), request)
    result = LocalLauncherHook(lease_seconds=60).run(request, lambda line: None)
    assert not result.succeeded and result.failure_class == USER_ERROR and result.exit_code == 1
    assert "bad data in shard 3" in result.failure_reason


def test_a_training_whose_launcher_died_for_good_stops_when_its_lease_runs_out(tmp_path):
    request = make_job(tmp_path, COUNTING.replace("STEPS", "600"))
    launcher = launch_in_a_process(request, 3)
    kill_launcher_once_training(launcher, request)
    killed_at = time.monotonic()
    pids = [pid for pid, _ in json.loads(pids_file(request).read_text())]
    tree = [p for pid in pids for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]]
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"still running {time.monotonic() - killed_at:.0f} s after the launcher died: {alive}"
    assert time.monotonic() - killed_at > 2  # not before the lease ran out
    assert "training was stopped" in Path(request.job_root, "output", "failure").read_text()
    assert "stopped renewing its lease" in launch_file(request, "algo-1.log").read_text()


def test_a_retry_that_finds_half_a_training_kills_it_and_starts_again(tmp_path):
    request = make_job(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(600)\n", instance_count=2)
    first = LocalLauncherHook()
    up = threading.Event()
    threading.Thread(target=lambda: first.run(request, lambda l: up.set()), daemon=True).start()
    assert up.wait(30)
    survivor, victim = first._procs
    os.killpg(victim.pid, 9)  # one host died with the worker: a half training cannot be finished
    victim.wait(10)
    Path(request.job_root, "code", "train.py").write_text("print('second attempt')\n")
    result = LocalLauncherHook().run(request, lambda line: None)
    assert result.succeeded
    try:
        survivor_status = psutil.Process(survivor.pid).status()
    except psutil.NoSuchProcess:  # reaped between the lookup and the read
        survivor_status = psutil.STATUS_DEAD
    assert survivor_status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD), "the half training's survivor still runs"


def test_one_failed_host_stops_its_waiting_peer(tmp_path, monkeypatch):
    monkeypatch.setattr("operators.launch.local.supervision.PEER_FAILURE_GRACE_SECONDS", 1.0)
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


def test_bubblewrap_setpriv_and_nsenter_get_no_variable_of_the_job(tmp_path, monkeypatch):
    # Each of them runs as root (setpriv inside the sandbox, before it drops), and the loader acts on LD_PRELOAD,
    # LD_AUDIT, ... in any process that execs with them: the job's variables reach `train` on a descriptor only.
    job_variables = {"LD_PRELOAD": "/job/code/x.so", "LD_AUDIT": "/job/code/y.so", "GREETING": "hi"}
    request = replace(make_job(tmp_path, "pass\n", instance_count=2), env=job_variables,
                      secret_env={"API_TOKEN": "hunter2"})
    started = []

    class Started:  # what Popen was asked to start: its argv, its environment, what train would read on its fd
        pid = os.getpid()

        def __init__(self, cmd, env, pass_fds=(), **kwargs):
            given = cmd[cmd.index("--environment-fd") + 1] if "--environment-fd" in cmd else None
            variables = read_job_variables(os.dup(int(given))) if given and int(given) in pass_fds else None
            started.append((cmd, env, variables))

        def poll(self):
            return None

    launcher = LocalLauncherHook(sandbox="bubblewrap", network="none")
    monkeypatch.setattr(launcher._isolation, "run_as", lambda: (4242, 4242))  # a root worker's sandbox: setpriv
    monkeypatch.setattr(local_launcher.subprocess, "Popen", Started)
    # The second host joins the first one's network namespace through nsenter.
    monkeypatch.setattr(local_launcher, "open_namespace", lambda status, running: os.pipe())
    launcher._start(request, ensure_state_dir(request.workspace, request.job_name, LAUNCH_DIR))

    assert [os.path.basename(cmd[0]) for cmd, _, _ in started] == ["bwrap", "nsenter"]
    assert all(any(os.path.basename(arg) == "setpriv" for arg in cmd) for cmd, _, _ in started)
    for cmd, env, variables in started:
        assert not set(env) & {*job_variables, "API_TOKEN"}, sorted(env)
        assert not any("hunter2" in value or "/job/code" in value for value in env.values())
        assert not any("hunter2" in arg for arg in cmd)
        assert variables == {**job_variables, "API_TOKEN": "hunter2"}  # train applies them after the drop


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


def test_kill_9_of_the_worker_leaves_no_training_running_once_its_lease_ran_out(tmp_path):
    # The training waits [training] local_lease_seconds for a retry to reattach (here 2 s), then stops, grandchildren
    # and all.
    request = make_job(tmp_path, """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("up", flush=True)
        time.sleep(600)
    """, max_run_seconds=600)
    worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        from operators.launch.base import LaunchRequest
        from operators.launch.local.launcher import LocalLauncherHook
        request = LaunchRequest.from_dict(json.loads(sys.argv[1]))
        LocalLauncherHook(lease_seconds=2).run(request, lambda line: print(line, flush=True))
    """), json.dumps(request.to_dict())], stdout=subprocess.PIPE, text=True)
    try:
        for line in worker.stdout:  # the launcher's own log lines come first
            if line.strip() == "up":
                break
        tree = psutil.Process(worker.pid).children(recursive=True)
        assert len(tree) >= 3  # (bwrap,) train, the script, its child
        worker.kill()  # kill -9 of the Airflow worker
        worker.wait(10)
        deadline = time.monotonic() + 30
        while _live(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _live(tree), "the training outlived its worker"
    finally:
        if worker.poll() is None:
            worker.kill()


# -- a hostile job: what it writes in its job root never steers the worker (issue 23) ---------------------------------
REWRITER = """
    import json, os, sys, time
    victim, outside, state = int(os.environ["VICTIM"]), os.environ["OUTSIDE"], os.environ["STATE_GUESS"]
    root = os.environ["TRAINING_ROOT"]
    forged = json.dumps([[victim, float("nan")]])
    wrote = []
    for path in (os.path.join(root, ".launch-pids.json"), os.path.join(state, "launch-pids.json")):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(forged)
            wrote.append(path)
        except OSError:
            pass
    for launch in (os.path.join(root, ".launch"), os.path.join(state, "launch")):
        for name in ("lease", "algo-1.exit", "algo-1.status", "algo-1.log"):
            try:
                os.makedirs(launch, exist_ok=True)
                if os.path.lexists(os.path.join(launch, name)):
                    os.unlink(os.path.join(launch, name))
                os.symlink(outside, os.path.join(launch, name))
                wrote.append(os.path.join(launch, name))
            except OSError:
                pass
    try:
        os.utime("/run/training/lease")  # the lease the sandbox is given is read-only
        wrote.append("lease")
    except OSError:
        pass
    print("WROTE", sorted(wrote), flush=True)
    time.sleep(600)
"""


def test_a_hostile_job_rewriting_pid_and_lease_files_cannot_make_stop_kill_or_touch_anything_else(tmp_path):
    victim = subprocess.Popen(["sleep", "600"])  # a process of the worker that is not the job's
    outside = tmp_path / "outside.txt"
    outside.write_text("not the job's")
    before = time.time() - 3600
    os.utime(outside, (before, before))
    request = make_job(tmp_path, REWRITER, max_run_seconds=120)
    state = state_path(request.workspace, request.job_name)
    request = LaunchRequest(**{**request.__dict__, "env": {"VICTIM": str(victim.pid), "OUTSIDE": str(outside),
                                                           "STATE_GUESS": state}})
    lines: list[str] = []
    wrote = threading.Event()
    launcher = LocalLauncherHook(sandbox="bubblewrap", lease_seconds=5)  # the lease is renewed every 0.5 s
    runner = threading.Thread(target=lambda: launcher.run(request, lambda l: (lines.append(l), l.startswith(
        "WROTE") and wrote.set())))
    try:
        runner.start()
        assert wrote.wait(60), lines
        assert "/run/training/lease" not in str(lines) and "'lease'" not in str(lines)
        # Whatever it wrote at the state directory's path landed in its private /tmp: the worker's records are intact.
        assert json.loads(pids_file(request).read_text())[0][0] != victim.pid
        assert not launch_file(request, "lease").is_symlink()
        time.sleep(2)  # a few lease renewals
        # A fresh hook, as on_kill after a worker restart: only what the state directory recorded is stopped.
        LocalLauncherHook(sandbox="bubblewrap").stop(request)
        launcher.stop(request)
        runner.join(60)
        assert not runner.is_alive()
        assert victim.poll() is None, "stopping the job killed a process that was not the job's"
        assert outside.read_text() == "not the job's" and outside.stat().st_mtime == before
    finally:
        launcher.stop(request)
        victim.kill()
        victim.wait()


def _listener(address: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((address, 0))
    sock.listen()
    return sock


def _worker_addresses() -> list[str]:
    found = ["127.0.0.1"]
    for addresses in psutil.net_if_addrs().values():
        found += [a.address for a in addresses if a.family == socket.AF_INET and not a.address.startswith("127.")]
    return found


PROBE = """
    import socket, sys
    for target in sys.argv[1:] or __import__("os").environ["TARGETS"].split():
        address, port = target.rsplit(":", 1)
        try:
            socket.create_connection((address, int(port)), timeout=5).close()
            print("REACHED", target, flush=True)
        except OSError as err:
            print("REFUSED", target, type(err).__name__, flush=True)
"""


def _probe(tmp_path, network: str) -> tuple[list[str], list[str]]:
    listeners = [_listener(address) for address in _worker_addresses()]
    try:
        targets = [f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in listeners]
        request = make_job(tmp_path, PROBE)
        request = LaunchRequest(**{**request.__dict__, "env": {"TARGETS": " ".join(targets)}})
        lines: list[str] = []
        assert LocalLauncherHook(sandbox="bubblewrap", network=network).run(request, lines.append).succeeded, lines
        return targets, lines
    finally:
        for sock in listeners:
            sock.close()


def test_user_code_reaches_no_port_the_worker_listens_on(tmp_path):
    targets, lines = _probe(tmp_path, "none")
    assert [line for line in lines if line.startswith("REFUSED")] and not [l for l in lines if "REACHED" in l], lines
    assert len([line for line in lines if line.startswith("REFUSED")]) == len(targets)


@pytest.mark.skipif(not shutil.which("slirp4netns"), reason="slirp4netns is not installed (make sandbox-deps)")
def test_slirp4netns_gives_a_way_out_but_never_the_workers_loopback(tmp_path):
    targets, lines = _probe(tmp_path, "slirp4netns")
    assert f"REFUSED {targets[0]} ConnectionRefusedError" in lines, lines  # 127.0.0.1: the job's own loopback
    # The worker's other addresses are reached the way any host on the network reaches them: that is egress.
    assert all(f"REACHED {target}" in lines for target in targets[1:]), lines


def test_the_hosts_of_a_job_reach_each_other_in_their_own_network(tmp_path):
    request = make_job(tmp_path, """
        import os, socket, time
        port = int(os.environ["MASTER_PORT"])
        if os.environ["TM_CURRENT_HOST"] == "algo-1":
            server = socket.socket()
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((os.environ["MASTER_ADDR"], port))
            server.listen()
            conn, _ = server.accept()
            print("GOT", conn.recv(64).decode(), flush=True)
        else:
            for _ in range(300):
                try:
                    socket.create_connection((os.environ["MASTER_ADDR"], port), timeout=5).sendall(b"hello from 2")
                    break
                except OSError:
                    time.sleep(0.1)
    """, instance_count=2, distribution="pytorch")
    lines: list[str] = []
    result = LocalLauncherHook(sandbox="bubblewrap", network="none").run(request, lines.append)
    assert result.succeeded, lines
    assert "[algo-1] GOT hello from 2" in lines


def test_output_without_newlines_reaches_the_worker_in_bounded_pieces(tmp_path):
    # The worker never holds a job's output whole: 8 MiB printed as one line come as lines of at most 64 KiB.
    from operators.launch.local.output import MAX_LINE_BYTES

    request = make_job(tmp_path, "import sys\nsys.stdout.write('x' * (8 * 1024 * 1024))\nsys.stdout.flush()\n")
    lines: list[str] = []
    result = LocalLauncherHook().run(request, lines.append)
    assert result.succeeded
    pieces = [line for line in lines if line.startswith("xxx")]  # the last one ends with what train wrote next
    assert sum(len(line) - len(line.lstrip("x")) for line in pieces) == 8 * 1024 * 1024
    assert max(len(line) for line in pieces) <= 2 * MAX_LINE_BYTES and len(pieces) >= 64

"""A hostile tenant on the local backend, with the real sandbox, cgroups and `train`: never root, never more than
it asked for, only its own GPUs. These tests run as root (as `make airflow`'s worker does here); one runs the
sandbox as an unprivileged worker would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import hostile_kernel
import pytest
from local_jobs import make_job

from operators.launch.base import OOM, USER_ERROR, LaunchRequest
from operators.launch.local import syscalls
from operators.launch.local.launcher import LocalLauncherHook
from operators.launch.local.limits import cgroups_available
from operators.settings import training_settings
from training_runtime.layouts import layout_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs a root worker (uids, cgroups): run as root")

HOSTILE = hostile_kernel.PROBE + textwrap.dedent(r"""
    import ctypes, json, os
    found = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "reached": hostile_reached()}
    libc = ctypes.CDLL(None, use_errno=True)
    # CLONE_NEWUSER: a user namespace of its own would make it root again (0: it could)
    found["unshare"] = libc.unshare(0x10000000) == 0 or os.strerror(ctypes.get_errno())
    found["etc"] = sorted(os.listdir("/etc"))
    print("FOUND " + json.dumps(found), flush=True)
""")


def _found(lines: list[str]) -> dict:
    return json.loads(next(line for line in lines if line.startswith("FOUND "))[len("FOUND "):])


def test_user_code_of_a_root_worker_is_not_root_and_reaches_no_kernel_setting(tmp_path):
    request = make_job(tmp_path, HOSTILE)
    lines: list[str] = []
    result = LocalLauncherHook(sandbox="bubblewrap").run(request, lines.append)
    assert result.succeeded, lines
    found = _found(lines)
    low, high = training_settings().local_uid_range
    assert low <= found["uid"] <= high and found["gid"] == found["uid"] and found["groups"] in ([], [found["gid"]])
    assert found["reached"] == [] and found["unshare"] is not True, found
    assert "shadow" not in found["etc"] and "passwd" in found["etc"] and "ssh" not in found["etc"]
    # The job root was the job's own while it ran (train wrote its markers as that uid).
    assert (Path(request.job_root) / "output" / "success").stat().st_uid == found["uid"]
    # The same script unsandboxed, as the root worker itself, could: the test can fail.
    lines.clear()
    assert LocalLauncherHook(sandbox="none").run(request, lines.append).succeeded
    unsandboxed = _found(lines)
    assert unsandboxed["uid"] == 0 and {"core_pattern", "shadow"} <= set(unsandboxed["reached"])


# A tenant's shared library: records, in every process the loader puts it in, who that process is and whether it
# can read a file only the host's root can (the checkout's secrets, /etc/shadow). LD_PRELOAD loads it as a library
# (its constructor runs), LD_AUDIT as an audit module (ld.so calls its la_version).
LOADER_PROBE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static void record(const char *how) {
    char comm[64] = "?", line[512];
    int fd = open("/proc/self/comm", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, comm, sizeof comm - 1);
        if (n > 0) comm[n - 1] = 0;
        close(fd);
    }
    int shadow = open("/etc/shadow", O_RDONLY), secret = open(SECRET, O_RDONLY);
    int len = snprintf(line, sizeof line, "%s pid=%d uid=%d euid=%d shadow=%d secret=%d comm=%s\n", how, (int)getpid(),
                       (int)getuid(), (int)geteuid(), shadow >= 0, secret >= 0, comm);
    if (shadow >= 0) close(shadow);
    if (secret >= 0) close(secret);
    int out = open(RECORD, O_WRONLY | O_APPEND);
    if (out >= 0) {
        if (write(out, line, len) < 0) {}
        close(out);
    }
}

#ifdef AUDIT
unsigned int la_version(unsigned int version) { record("audit"); return version; }
#else
__attribute__((constructor)) static void preload(void) { record("preload"); }
#endif
"""


def _loader_records(path: Path) -> list[dict]:
    records = []
    for line in path.read_text().splitlines():
        how, *fields = line.split()
        records.append({"how": how, **dict(field.split("=", 1) for field in fields)})
    return records


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the tenant's library")
def test_a_jobs_loader_variables_act_only_in_its_own_unprivileged_code(tmp_path, monkeypatch):
    # `"environment": {"LD_PRELOAD": ...}` once ran the tenant's library in bubblewrap as host root. Two hosts: the
    # second starts through nsenter, another root process.
    home = tmp_path / "airflow-home"
    home.mkdir()
    secret = home / "airflow-secrets.env"
    secret.write_text("password = hunter2\n")
    secret.chmod(0o600)
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    request = make_job(tmp_path, """
        import os
        print("SCRIPT pid=%d LD_PRELOAD=%s LD_AUDIT=%s" % (os.getpid(), os.environ["LD_PRELOAD"],
                                                          os.environ["LD_AUDIT"]), flush=True)
    """, instance_count=2)
    code = Path(layout_for("ti", request.job_root).code_dir)
    record = Path(request.job_root, "loader-record.txt")
    record.touch(mode=0o666)
    record.chmod(0o666)
    source = tmp_path / "probe.c"
    source.write_text(LOADER_PROBE)
    for name, flags in (("libpreload.so", []), ("libaudit.so", ["-DAUDIT"])):
        subprocess.run(["gcc", "-shared", "-fPIC", *flags, f'-DRECORD="{record}"', f'-DSECRET="{secret}"', "-o",
                        str(code / name), str(source)], check=True, capture_output=True)
    request = replace(request, env={"LD_PRELOAD": str(code / "libpreload.so"), "LD_AUDIT": str(code / "libaudit.so")})
    lines: list[str] = []
    result = LocalLauncherHook(sandbox="bubblewrap").run(request, lines.append)

    records = _loader_records(record)
    privileged = [r for r in records if "0" in (r["uid"], r["euid"]) or "1" in (r["shadow"], r["secret"])]
    assert privileged == [], privileged
    assert result.succeeded and (Path(request.job_root) / "output" / "success").exists(), (result, lines)
    # The variables still work inside the sandbox: both libraries ran in each host's user script.
    scripts = [line for line in lines if " SCRIPT " in line]
    assert len(scripts) == 2 and all(f"LD_PRELOAD={code}/libpreload.so" in line for line in scripts), lines
    for line in scripts:
        pid = line.split("pid=")[1].split()[0]
        assert {r["how"] for r in records if r["pid"] == pid and r["comm"].startswith("python")} == {
            "preload", "audit"}, (line, records)


@pytest.fixture
def open_tmp_path():
    """A temporary directory an unprivileged uid can reach (pytest's own are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="unprivileged-worker-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_sandbox_of_an_unprivileged_worker_maps_the_workers_uid_never_root(open_tmp_path):
    # The worker as the official Airflow image runs it: a plain uid (here nobody). Its bubblewrap makes a user
    # namespace; the system Python runs the script (root's Python is not reachable by that uid).
    tmp_path = open_tmp_path
    job_root = tmp_path / "job"
    job_root.mkdir()
    os.chown(job_root, 65534, 65534)
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE)
    filter_path = syscalls.write_filter(str(tmp_path / "seccomp.bpf"))
    os.chmod(filter_path, 0o644)
    build = textwrap.dedent(f"""
        import os, subprocess, sys
        sys.path[:0] = [{os.getcwd()!r}]
        from operators.launch.local.sandbox import bwrap_command
        fd = os.open({filter_path!r}, os.O_RDONLY)
        cmd = bwrap_command(["/usr/bin/python3", {str(script)!r}], {str(job_root)!r}, readonly=[{str(script)!r}],
                            unshare_net=True, seccomp_fd=fd)
        sys.exit(subprocess.run(cmd, pass_fds=(fd,)).returncode)
    """)
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                          build], capture_output=True, text=True, timeout=120,
                         env={"PATH": os.environ["PATH"], "PYTHONPATH": os.path.join(os.getcwd(), "runtime")})
    assert out.returncode == 0, out.stderr
    found = _found(out.stdout.splitlines())
    assert found["uid"] == 65534
    assert found["reached"] == [] and found["unshare"] is not True, found


@pytest.mark.skipif(cgroups_available() is not None, reason=f"no cgroups here: {cgroups_available()}")
def test_a_job_over_its_memory_ends_oom_killed_with_its_limit(tmp_path):
    request = make_job(tmp_path, """
        chunks = []
        for i in range(64):
            chunks.append(bytearray(32 * 1024 * 1024))  # 2 GiB in all, 32 MiB at a time
            print("allocated", (i + 1) * 32, "MiB", flush=True)
        print("NOT LIMITED", flush=True)
    """)
    request = replace(request, resources={"memory": "256Mi"})
    lines: list[str] = []
    result = LocalLauncherHook().run(request, lines.append)
    assert "NOT LIMITED" not in lines
    assert not result.succeeded and result.failure_class == OOM, (result, lines[-5:])
    assert "256 MiB" in result.failure_reason


@pytest.mark.skipif(cgroups_available() is not None, reason=f"no cgroups here: {cgroups_available()}")
def test_a_task_bomb_stops_at_the_pids_limit_while_another_job_keeps_running(tmp_path):
    settings = replace(training_settings(), local_pids_limit=64)
    bomb = make_job(tmp_path / "bomb", """
        import subprocess
        children = []
        try:
            while len(children) < 1000:
                children.append(subprocess.Popen(["sleep", "30"]))
        except OSError as err:
            print("stopped by", err.strerror, flush=True)
        print("SPAWNED", len(children), flush=True)
        for child in children:
            child.kill()
    """)
    bomb = replace(bomb, job_name="bomb", workspace=str(tmp_path))  # one worker: one workspace
    quiet = replace(make_job(tmp_path / "quiet", "import time\ntime.sleep(2)\nprint('QUIET DONE', flush=True)\n"),
                    job_name="quiet", workspace=str(tmp_path))
    results, lines = {}, {"bomb": [], "quiet": []}
    runs = [threading.Thread(target=lambda r=r: results.__setitem__(
        r.job_name, LocalLauncherHook(settings=settings).run(r, lines[r.job_name].append))) for r in (bomb, quiet)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(240)
    assert results["bomb"].succeeded and results["quiet"].succeeded, (results, lines)
    spawned = int(next(line for line in lines["bomb"] if line.startswith("SPAWNED")).split()[1])
    assert 0 < spawned < 64
    assert "QUIET DONE" in lines["quiet"]


@pytest.mark.skipif(cgroups_available() is not None, reason=f"no cgroups here: {cgroups_available()}")
def test_the_jobs_cpu_and_memory_figures_are_its_own_cgroups(tmp_path):
    request = make_job(tmp_path, """
        import time
        end = time.monotonic() + 3
        while time.monotonic() < end:  # busy: as much CPU as it may have
            pass
        start = time.process_time()
        wall = time.monotonic()
        while time.monotonic() < wall + 2:
            pass
        print("CPU SHARE", (time.process_time() - start) / (time.monotonic() - wall), flush=True)
    """)
    request = replace(request, resources={"cpu": "0.5", "memory": "1Gi"},
                      env={"TRAINING_SYSTEM_METRICS_SECONDS": "1"})
    lines: list[str] = []
    assert LocalLauncherHook().run(request, lines.append).succeeded, lines
    share = float(next(line for line in lines if line.startswith("CPU SHARE")).split()[2])
    assert share < 0.75  # a quota of half a core (unlimited, a busy loop gets ~1.0 of an idle core)
    points = [json.loads(line) for line in (Path(request.job_root) / "output" / "metrics.jsonl").read_text().splitlines()]
    memory = [p["value"] for p in points if p["name"] == "system/algo-1/memory_bytes"]
    percent = [p["value"] for p in points if p["name"] == "system/algo-1/memory_percent"]
    assert memory and max(memory) < 1024**3, memory  # the job's own few MB, not the worker's GBs
    assert percent  # of its own limit


def _fake_gpus(tmp_path: Path, count: int) -> str:
    # No GPU on this machine: regular files stand in for the device nodes (bound the same way).
    devices = tmp_path / "dev"
    devices.mkdir()
    for i in range(count):
        (devices / f"nvidia{i}").write_text(f"gpu {i}\n")
    (devices / "nvidiactl").write_text("control\n")
    return str(devices / "nvidia[0-9]*")


GPU_PROBE = """
    import glob, os, time
    print("DEVICES", sorted(os.path.basename(d) for d in glob.glob("/dev/nvidia*")), flush=True)
    print("VISIBLE", repr(os.environ.get("CUDA_VISIBLE_DEVICES")), flush=True)
    print("NUM_GPUS", os.environ.get("SM_NUM_GPUS"), os.environ.get("TM_NUM_GPUS"), flush=True)
    time.sleep(float(os.environ.get("HOLD", "0")))
"""


def _gpu_job(tmp_path: Path, name: str, gpus: int, hold: float = 0) -> LaunchRequest:
    request = make_job(tmp_path / name, GPU_PROBE)
    config = Path(request.job_root) / "input" / "config" / "trainingjobconfig.json"
    job_config = json.loads(config.read_text())
    job_config["num_gpus"] = gpus
    config.write_text(json.dumps(job_config))
    # Every job of the worker in one workspace, where the GPU leases are kept.
    return replace(request, job_name=name, workspace=str(tmp_path), resources={"gpu": gpus}, env={"HOLD": str(hold)})


def _line(lines: list[str], key: str) -> str:
    return next(line for line in lines if line.startswith(key + " "))[len(key) + 1:]


def test_gpu_jobs_get_disjoint_devices_and_a_job_without_gpus_sees_none(tmp_path, caplog):
    settings = replace(training_settings(), local_gpu_devices=_fake_gpus(tmp_path, 4))
    first, second = _gpu_job(tmp_path, "first", 2, hold=4), _gpu_job(tmp_path, "second", 2, hold=4)
    third = _gpu_job(tmp_path, "third", 1)  # waits: the first two hold all four
    none = _gpu_job(tmp_path, "none", 0)
    results, lines = {}, {name: [] for name in ("first", "second", "third", "none")}

    def run(request):
        results[request.job_name] = LocalLauncherHook(settings=settings).run(request, lines[request.job_name].append)

    threads = [threading.Thread(target=run, args=(r,)) for r in (first, second)]
    for thread in threads:
        thread.start()
    while not all(any(line.startswith("DEVICES") for line in lines[n]) for n in ("first", "second")):
        assert all(t.is_alive() for t in threads) or all(lines[n] for n in ("first", "second")), (results, lines)
        threading.Event().wait(0.2)
    with caplog.at_level("INFO", logger="operators.launch.worker_slots"):
        run(third)  # returns once one of the first two gave its GPUs back
    run(none)
    for thread in threads:
        thread.join(120)
    assert all(result.succeeded for result in results.values()), (results, lines)
    held = {name: set(eval(_line(lines[name], "DEVICES"))) for name in ("first", "second", "third")}
    gpus = {name: devices - {"nvidiactl"} for name, devices in held.items()}
    assert len(gpus["first"]) == len(gpus["second"]) == 2 and not gpus["first"] & gpus["second"]
    assert len(gpus["third"]) == 1 and "nvidiactl" in held["first"]
    assert _line(lines["first"], "VISIBLE") == "'0,1'" and _line(lines["first"], "NUM_GPUS") == "2 2"
    assert any("Waiting for 1 GPU(s): 0 of 4 free" in r.getMessage() for r in caplog.records)
    assert eval(_line(lines["none"], "DEVICES")) == [] and _line(lines["none"], "VISIBLE") == "''"


def test_a_job_asking_for_more_gpus_than_the_worker_has_fails_at_once_naming_the_field(tmp_path):
    settings = replace(training_settings(), local_gpu_devices=_fake_gpus(tmp_path, 2))
    result = LocalLauncherHook(settings=settings).run(_gpu_job(tmp_path, "greedy", 3), lambda line: None)
    assert not result.succeeded and result.failure_class == USER_ERROR
    assert "resources.gpu" in result.failure_reason and "2 GPU(s)" in result.failure_reason


def test_the_seccomp_filter_refuses_what_the_kernel_would_allow_any_user_but_not_threads_or_forks(tmp_path):
    # A user namespace and the session keyring are open to every uid; the filter refuses them (EPERM = 1).
    request = make_job(tmp_path, """
        import ctypes, os, threading
        libc = ctypes.CDLL(None, use_errno=True)
        results = {}
        results["unshare"] = libc.unshare(0x10000000) == 0 or ctypes.get_errno()  # CLONE_NEWUSER
        results["keyctl"] = libc.syscall(250, 0, -3, 0) >= 0 or ctypes.get_errno()  # KEYCTL_GET_KEYRING_ID
        worker = threading.Thread(target=lambda: results.__setitem__("thread", True))
        worker.start()
        worker.join()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        results["fork"] = os.waitpid(pid, 0)[1] >> 8
        print("SECCOMP", results, flush=True)
    """)
    lines: list[str] = []
    assert LocalLauncherHook().run(request, lines.append).succeeded, lines
    assert eval(_line(lines, "SECCOMP")) == {"unshare": 1, "keyctl": 1, "thread": True, "fork": 7}
    lines.clear()  # without the sandbox (no filter) both calls work: the test can fail
    assert LocalLauncherHook(sandbox="none").run(request, lines.append).succeeded, lines
    assert eval(_line(lines, "SECCOMP")) == {"unshare": True, "keyctl": True, "thread": True, "fork": 7}


def test_a_spec_above_the_admins_maximum_is_refused_before_launch(tmp_path):
    settings = replace(training_settings(), local_max_memory="4Gi", local_max_cpu="2")
    request = replace(make_job(tmp_path, "print('ran')\n"), resources={"memory": "16Gi"})
    result = LocalLauncherHook(settings=settings).run(request, lambda line: None)
    assert not result.succeeded and result.failure_class == USER_ERROR
    assert result.failure_reason.startswith("resources.memory: 16Gi is more than the local backend allows")
    assert not (Path(request.workspace) / "state" / "job" / "launch-pids.json").exists()


def test_no_file_of_a_job_outgrows_its_disk_cap_however_fast_it_is_written(tmp_path):
    # The kernel's per-file limit (RLIMIT_FSIZE at the job's disk cap): a single write past it fails at once, before
    # any measurement of the job root could see it; a program that does not ignore SIGXFSZ is ended by it.
    MiB = 1024 * 1024
    script = textwrap.dedent("""
        import os, subprocess
        try:
            with open("big.bin", "wb") as fh:
                fh.write(b"x" * (8 * 1024 * 1024))
        except OSError as err:
            print("WRITE", err.strerror, os.path.getsize("big.bin"), flush=True)
        dd = subprocess.run(["dd", "if=/dev/zero", "of=dd.bin", "bs=1M", "count=8"], capture_output=True)
        print("DD", dd.returncode, os.path.getsize("dd.bin"), flush=True)
    """)
    request = replace(make_job(tmp_path, script), disk_limit=4 * MiB)
    lines: list[str] = []
    result = LocalLauncherHook(sandbox="bubblewrap").run(request, lines.append)
    assert result.succeeded, lines
    assert f"WRITE File too large {4 * MiB}" in lines, lines
    assert f"DD -25 {4 * MiB}" in lines, lines  # dd killed by SIGXFSZ at the limit
    # Without a cap the same script writes both files whole: the test can fail.
    lines.clear()
    assert LocalLauncherHook(sandbox="bubblewrap").run(make_job(tmp_path / "uncapped", script), lines.append).succeeded
    assert f"DD 0 {8 * MiB}" in lines and not any(line.startswith("WRITE") for line in lines), lines

"""The Docker launcher on the real engine (Debian's docker.io; `make test` starts it and builds the images).

Each test runs the training image through DockerLauncherHook.run: containers as the image's non-root user with
all capabilities dropped and no new privileges, hosts resolving each other on the job's network, failure
classes read from what really happened (a failing script, the kernel's OOM killer under a memory limit,
max_run_seconds), a task bomb stopped at the pids limit, an image whose USER has group root refused before any
container, nothing left behind after a kill, and a retry reattaching to a running job.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import hostile_kernel
import pytest

from docker_support import DOCKER_URL, TRAINING_IMAGE, engine, require_image

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]

SCRIPT = hostile_kernel.PROBE + textwrap.dedent('''
    import json, os, socket, sys, time
    me = os.environ["TM_CURRENT_HOST"]
    hosts = json.loads(os.environ["TM_HOSTS"])
    mode = os.environ.get("SM_HP_MODE", "ok")
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "starts-" + me), "a") as f:
        f.write("start\\n")  # one line per time this host's training started
    if mode == "fail":
        if me != hosts[0]:
            time.sleep(120)  # a peer: stopped by the launcher when host 0 fails
        time.sleep(2)
        print("about to fail", flush=True)
        raise RuntimeError("planned failure on " + me)
    if mode == "secret":
        import hashlib
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "token.sha256"), "w") as f:
            f.write(hashlib.sha256(os.environ["API_TOKEN"].encode()).hexdigest())
        print("read the token", flush=True)
        sys.exit(0)
    if mode == "oom":
        hog = []
        while True:
            hog.append(bytearray(16 * 2**20))  # the memory limit is far below what this asks for
    if mode == "fork":
        import subprocess
        children = []
        try:
            while len(children) < 200:  # without a pids limit: stop anyway, far above the test's limit
                children.append(subprocess.Popen(["sleep", "30"]))
        except OSError as err:  # fork refused: the container's pids limit
            print(f"fork failed: {err}", flush=True)
        print(f"spawned {len(children)}", flush=True)
        for child in children:
            child.kill()
            child.wait()
        sys.exit(0)
    if mode == "bigfile":  # one file past the job's disk cap (the container's fsize ulimit)
        path = os.path.join(os.environ["SM_MODEL_DIR"], "big.bin")
        try:
            with open(path, "wb") as f:
                f.write(b"x" * (8 * 1024 * 1024))
        except OSError as err:
            print(f"write failed: {err.strerror} at {os.path.getsize(path)}", flush=True)
        sys.exit(0)
    if mode == "sleep":
        for i in range(int(os.environ.get("SM_HP_SECONDS", "600"))):
            print(f"{me} tick {i}", flush=True)
            time.sleep(1)
    status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
    report = {
        "reached": hostile_reached(),
        "host": me,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "resolved": {h: socket.getaddrinfo(h, 29500)[0][4][0] for h in hosts},
        "cap_eff": status["CapEff"].strip(),
        "no_new_privs": status["NoNewPrivs"].strip(),
        "channel": sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])),
        "channel_writable": os.access(os.environ["SM_CHANNEL_TRAIN"], os.W_OK),
    }
    with open(os.path.join(os.environ["SM_MODEL_DIR"], me + ".json"), "w") as f:
        json.dump(report, f)
    print(f"{me} done", flush=True)
''')


def make_request(tmp_path: Path, hosts: int = 1, mode: str = "ok", image: str = TRAINING_IMAGE, **fields):
    from operators.launch.docker.launcher import DockerLauncherHook
    from operators.launch.base import LaunchRequest

    client = engine()
    require_image(client, image)
    job_name = f"dk-{mode}-{uuid.uuid4().hex[:6]}"
    hook = DockerLauncherHook(docker_url=DOCKER_URL, docker_conn_id="")
    names = hook.hosts(job_name, hosts)
    workspace = tmp_path / "workspace"
    root = workspace / "jobs" / job_name
    for sub in ("code", "input/config", "model", "output/data", "checkpoints"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "code" / "train.py").write_text(SCRIPT)
    config = root / "input" / "config"
    hyperparameters = {"mode": mode, **fields.pop("hyperparameters", {})}
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": names[0], "hosts": names}))
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "File"}}))
    (config / "trainingjobconfig.json").write_text(
        json.dumps({"job_name": job_name, "layout": "ti", "entry_point": "train.py", "processes_per_host": 1})
    )
    entry = workspace / "cache" / f"entry-{job_name}"
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "part-0.csv").write_text("x,y\n1,2\n")
    values = dict(
        job_name=job_name,
        job_root=str(root),
        workspace=str(workspace),
        layout="ti",
        instance_count=hosts,
        hosts=tuple(names),
        channel_entries={"train": str(entry)},
        image_uri=image,
        resources={"cpu": "1", "memory": "256Mi"},
        max_run_seconds=300,
        env={"PYTHONUNBUFFERED": "1"},
        options={"poll_interval": 0.3},
    )
    values.update(fields)
    return hook, LaunchRequest(**values)


def leftovers(request) -> dict:
    """What the engine still holds for a job: containers, networks, volumes (by the job's label)."""
    from operators.launch.names import JOB_LABEL, resource_name

    client = engine()
    label = {"label": f"{JOB_LABEL}={resource_name(request.job_name)}"}
    return {
        "containers": [c["Names"][0] for c in client.containers(all=True, filters=label)],
        "networks": [n["Name"] for n in client.networks(names=[resource_name(request.job_name)])],
        "volumes": [v["Name"] for v in (client.volumes(filters=label).get("Volumes") or [])],
    }


NOTHING = {"containers": [], "networks": [], "volumes": []}


def image_id(image: str) -> str:
    """What `docker image inspect` says the image's id is (the CLI, as a user would ask)."""
    return subprocess.run(["docker", "image", "inspect", image, "--format", "{{.Id}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_two_hosts_resolve_each_other_and_run_unprivileged_as_the_image_user(tmp_path):
    # Pinned to the image's id, in the form a pod's imageID names it (a reproduction of a run on Kubernetes): it runs.
    ran = image_id(TRAINING_IMAGE)
    hook, request = make_request(tmp_path, hosts=2,
                                 expected_image_digest=f"docker-pullable://docker.io/library/training-base@{ran}")
    lines: list[str] = []
    result = hook.run(request, lines.append)
    assert result.succeeded, (result.failure_reason, lines[-20:])
    assert result.image_digest == ran and ran.startswith("sha256:")  # what the containers ran: the image's id
    model = Path(request.job_root, "model")
    for host in request.hosts:
        report = json.loads((model / f"{host}.json").read_text())
        assert set(report["resolved"]) == set(request.hosts)
        assert (report["uid"], report["gid"]) == (1000, 1000)  # the image's USER, not root
        assert report["cap_eff"] == "0000000000000000" and report["no_new_privs"] == "1"
        assert report["reached"] == []  # no sysctl, no sysrq, no /etc/shadow
        assert report["channel"] == ["part-0.csv"] and not report["channel_writable"]
        assert (model / f"{host}.json").stat().st_uid == 1000
    assert any(line.startswith(f"[{request.hosts[1]}] ") and "done" in line for line in lines), lines[-10:]
    assert leftovers(request) == NOTHING


def test_a_configured_user_name_is_looked_up_in_the_image_and_given_the_job_root(tmp_path):
    hook, request = make_request(tmp_path, options={"user": "nobody"})
    lines: list[str] = []
    result = hook.run(request, lines.append)
    assert result.succeeded, (result.failure_reason, lines[-10:])
    report_file = Path(request.job_root, "model", f"{request.hosts[0]}.json")
    report = json.loads(report_file.read_text())
    assert (report["uid"], report["gid"]) == (65534, 65534)  # Debian's nobody:nogroup, from the image's passwd
    assert report_file.stat().st_uid == 65534 and Path(request.job_root).stat().st_uid == 65534


def test_the_container_gets_the_limits_and_security_options(tmp_path):
    hook, request = make_request(
        tmp_path, mode="sleep", resources={"cpu": "500m", "memory": "300Mi"}, hyperparameters={"seconds": 30}
    )
    thread = threading.Thread(target=hook.run, args=(request, lambda line: None), daemon=True)
    thread.start()
    client = engine()
    name = request.hosts[0]
    deadline = time.monotonic() + 60
    while True:
        found = client.containers(filters={"name": name})
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    try:
        config = client.inspect_container(name)
        host = config["HostConfig"]
        assert host["Memory"] == 300 * 2**20 and host["NanoCpus"] == 500_000_000
        assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"] and host["Init"]
        assert host["PidsLimit"] == 4096  # [training.docker] pids_limit's default
        assert config["Config"]["User"] == "1000:1000"  # the image's own non-root user
    finally:
        hook.stop(request)
        thread.join(timeout=60)
    assert leftovers(request) == NOTHING


def test_a_task_bomb_stops_at_the_pids_limit(tmp_path):
    from operators.launch.docker.launcher import DockerLauncherHook

    _, request = make_request(tmp_path, mode="fork")
    hook = DockerLauncherHook(docker_url=DOCKER_URL, docker_conn_id="", pids_limit=64)
    lines: list[str] = []
    result = hook.run(request, lines.append)
    assert result.succeeded, (result.failure_reason, lines[-10:])
    spawned = [int(match.group(1)) for line in lines if (match := re.fullmatch(r"spawned (\d+)", line.strip()))]
    assert spawned and 0 < spawned[0] < 64, lines[-10:]  # the limit counts tini, train and the script too
    assert any("fork failed" in line for line in lines), lines[-10:]
    assert leftovers(request) == NOTHING


def derived_image(tmp_path: Path, image: str, line: str) -> str:
    """The training image with one more Dockerfile line, built as `image`."""
    require_image(engine(), TRAINING_IMAGE)
    context = tmp_path / f"ctx-{image.split(':')[0]}"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {TRAINING_IMAGE}\n{line}\n")
    subprocess.run(["docker", "build", "-q", "-t", image, str(context)], check=True, capture_output=True,
                   env={**os.environ, "DOCKER_BUILDKIT": "0"}, timeout=300)
    return image


@pytest.fixture
def image_with_group_root(tmp_path):
    """The training image run as uid 1000 with group root (gid 0)."""
    return derived_image(tmp_path, "training-group-root-test:latest", "USER 1000:0")


def test_an_image_whose_user_has_group_root_is_refused_before_any_container(tmp_path, image_with_group_root):
    hook, request = make_request(tmp_path, image=image_with_group_root)
    result = hook.run(request, lambda line: None)
    assert (result.failure_class, result.retryable) == ("user_error", False), result
    assert result.failure_reason.startswith(
        f"image {image_with_group_root} runs as USER '1000:0' (group root): training containers never run")
    assert leftovers(request) == NOTHING
    assert engine().containers(all=True, filters={"ancestor": image_with_group_root}) == []


@pytest.fixture
def image_with_a_second_root(tmp_path):
    """The training image with a user `toor` that is uid 0 by another name."""
    return derived_image(tmp_path, "training-second-root-test:latest",
                         "USER root\nRUN echo 'toor:x:0:0::/root:/bin/sh' >> /etc/passwd\nUSER 1000:1000")


def test_a_user_name_that_is_root_in_the_image_is_refused_without_running_the_image(tmp_path,
                                                                                    image_with_a_second_root):
    # Resolving the name reads the image's /etc/passwd from a container never started: had it run `sh -c id` as
    # that name, the tenant's image would have run its code as uid 0 first.
    since = int(time.time()) - 1
    hook, request = make_request(tmp_path, image=image_with_a_second_root, options={"user": "toor"})
    result = hook.run(request, lambda line: None)
    assert (result.failure_class, result.retryable) == ("user_error", False), result
    assert result.failure_reason.startswith(f"docker option user 'toor' is uid 0 in image {image_with_a_second_root}")
    started = list(engine().events(since=since, until=int(time.time()) + 1, decode=True,
                                   filters={"type": "container", "event": "start",
                                            "image": image_with_a_second_root}))
    assert started == []
    assert engine().containers(all=True, filters={"ancestor": image_with_a_second_root}) == []
    assert leftovers(request) == NOTHING


def test_a_failing_host_is_a_user_error_with_its_message_and_exit_code_and_stops_the_others(tmp_path):
    hook, request = make_request(tmp_path, hosts=2, mode="fail")
    lines: list[str] = []
    started = time.monotonic()
    result = hook.run(request, lines.append)
    assert not result.succeeded and result.failure_class == "user_error" and result.exit_code == 1
    assert result.failure_reason.startswith(f"the training code failed on {request.hosts[0]}, exit code 1")
    assert f"planned failure on {request.hosts[0]}" in result.failure_reason
    assert time.monotonic() - started < 60  # host 1 did not sleep its 120 s: it was stopped
    assert any("about to fail" in line for line in lines)
    assert leftovers(request) == NOTHING


def test_running_out_of_memory_under_the_limit_is_the_oom_class(tmp_path):
    hook, request = make_request(tmp_path, mode="oom", resources={"cpu": "1", "memory": "128Mi"})
    result = hook.run(request, lambda line: None)
    assert result.failure_class == "oom_killed", result
    assert "memory" in result.failure_reason
    assert leftovers(request) == NOTHING


def test_max_run_seconds_stops_the_job(tmp_path):
    hook, request = make_request(tmp_path, mode="sleep", max_run_seconds=3)
    started = time.monotonic()
    result = hook.run(request, lambda line: None)
    assert result.failure_class == "timeout" and "max_run_seconds (3)" in result.failure_reason
    assert time.monotonic() - started < 60
    assert leftovers(request) == NOTHING


@pytest.fixture
def image_with_a_volume(tmp_path):
    """The training image plus a VOLUME, so the engine makes an anonymous volume per container."""
    return derived_image(tmp_path, "training-volume-test:latest", "VOLUME /scratch")


def test_stop_mid_run_leaves_no_container_network_or_volume(tmp_path, image_with_a_volume):
    volumes_before = {v["Name"] for v in engine().volumes().get("Volumes") or []}
    hook, request = make_request(tmp_path, hosts=2, mode="sleep", image=image_with_a_volume)
    lines: list[str] = []
    results = []
    thread = threading.Thread(target=lambda: results.append(hook.run(request, lines.append)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 90
    while not any("tick 2" in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert any("tick 2" in line for line in lines), lines[-10:]
    volumes_running = {v["Name"] for v in engine().volumes().get("Volumes") or []}
    assert len(volumes_running - volumes_before) >= 2  # one anonymous volume per container while it runs
    hook.stop(request)  # what on_kill does
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert results and not results[0].succeeded
    assert leftovers(request) == NOTHING
    assert not (volumes_running - volumes_before) & {v["Name"] for v in engine().volumes().get("Volumes") or []}


RUN_IN_A_WORKER = textwrap.dedent('''
    import json, sys
    from operators.launch.docker.launcher import DockerLauncherHook
    from operators.launch.base import LaunchRequest
    request = LaunchRequest.from_dict(json.loads(sys.argv[1]))
    DockerLauncherHook(docker_url=sys.argv[2], docker_conn_id="").run(request, lambda line: print(line, flush=True))
''')


def test_a_retry_after_the_worker_died_reattaches_instead_of_training_again(tmp_path):
    hook, request = make_request(tmp_path, hosts=2, mode="sleep", hyperparameters={"seconds": 6})
    worker = subprocess.Popen(
        [sys.executable, "-c", RUN_IN_A_WORKER, json.dumps(request.to_dict()), DOCKER_URL],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "runtime")])},
    )
    for line in worker.stdout:
        if "tick 1" in line:
            break
    worker.kill()  # the Airflow worker dies; the containers go on
    worker.wait()
    lines: list[str] = []
    result = hook.run(request, lines.append)  # the task's retry
    assert result.succeeded, (result.failure_reason, lines[-10:])
    assert any("reattaching" in line for line in lines), lines[:5]
    for host in request.hosts:
        assert Path(request.job_root, "model", f"starts-{host}").read_text() == "start\n"  # trained once
    assert leftovers(request) == NOTHING


def test_an_image_that_does_not_exist_fails_fast_as_an_image_error(tmp_path):
    hook, request = make_request(tmp_path, image=TRAINING_IMAGE)
    request = type(request)(**{**request.to_dict(), "image_uri": f"training-missing-{uuid.uuid4().hex[:6]}:1"})
    started = time.monotonic()
    result = hook.run(request, lambda line: None)
    assert result.failure_class == "image_error" and "training-missing-" in result.failure_reason
    assert time.monotonic() - started < 120
    assert leftovers(request) == NOTHING


def test_a_run_pinned_to_another_image_fails_fast_with_one_line_and_creates_nothing(tmp_path):
    """A reproduction whose tag names another image now: refused before any container, not trained on it."""
    hook, request = make_request(tmp_path, expected_image_digest="sha256:" + "0" * 64)
    started = time.monotonic()
    result = hook.run(request, lambda line: None)
    assert time.monotonic() - started < 60  # a hang guard: nothing was started
    assert (result.failure_class, result.retryable, result.image_digest) == ("image_error", False, None)
    assert result.failure_reason.startswith(
        f"image {TRAINING_IMAGE} is {image_id(TRAINING_IMAGE)}, not sha256:{'0' * 64} that the reproduced run ran; ")
    assert "\n" not in result.failure_reason
    assert leftovers(request) == NOTHING
    assert not Path(request.job_root, "model", f"starts-{request.hosts[0]}").exists()  # the script never ran


def test_credentials_reach_the_script_but_not_docker_inspect_logs_or_the_job_root(tmp_path, monkeypatch):
    import hashlib

    token = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("AIRFLOW_VAR_TRAINING_E2E_TOKEN", token)  # an Airflow Variable (environment backend)
    hook, request = make_request(
        tmp_path, mode="secret",
        options={"secret_variables": {"API_TOKEN": "training_e2e_token"}, "keep_containers": True},
    )
    lines: list[str] = []
    try:
        result = hook.run(request, lines.append)
        assert result.succeeded, (result.failure_reason, lines[-10:])
        assert Path(request.job_root, "model", "token.sha256").read_text() == hashlib.sha256(token.encode()).hexdigest()
        client = engine()
        for name in request.hosts:
            assert token not in json.dumps(client.inspect_container(name))  # Env, Cmd, Mounts: no value
        assert not any(token in line for line in lines)
        assert not [p for p in Path(request.workspace).rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    finally:
        hook.stop(request)
    assert leftovers(request) == NOTHING


def test_a_missing_credential_variable_fails_before_anything_is_created(tmp_path):
    hook, request = make_request(tmp_path, options={"secret_variables": {"API_TOKEN": "training_e2e_absent"}})
    missing = "secret_variables.API_TOKEN: cannot read Airflow Variable 'training_e2e_absent'"
    with pytest.raises(ValueError, match=missing):
        hook.run(request, lambda line: None)
    assert leftovers(request) == NOTHING


def test_no_file_of_a_job_outgrows_its_disk_cap(tmp_path):
    # The kernel's per-file limit in the container (the fsize ulimit at the job root's cap: launch/disk_cap.py).
    hook, request = make_request(tmp_path, mode="bigfile", disk_limit=4 * 2**20)
    lines: list[str] = []
    result = hook.run(request, lines.append)
    assert result.succeeded, (result.failure_reason, lines[-10:])
    assert any(line.endswith(f"write failed: File too large at {4 * 2**20}") for line in lines), lines[-10:]
    assert leftovers(request) == NOTHING

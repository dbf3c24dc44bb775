"""End to end on a real Docker engine: two hosts of the training runtime image on the job's network.

Skipped unless TRAINING_E2E_DOCKER=1 and an engine is reachable (DOCKER_HOST or /var/run/docker.sock).
One command (after `docker build -f docker/training.Dockerfile -t training-base:latest .`):

  TRAINING_E2E_DOCKER=1 TRAINING_E2E_IMAGE=training-base:latest \
    .venv/bin/python -m pytest tests/integration/test_docker_engine.py -v
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

DOCKER_URL = os.environ.get("DOCKER_HOST", "unix://var/run/docker.sock")
pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        os.environ.get("TRAINING_E2E_DOCKER") != "1"
        or (DOCKER_URL.startswith("unix://") and not Path(DOCKER_URL[len("unix:/"):]).exists()),
        reason="needs TRAINING_E2E_DOCKER=1 and a Docker engine (see docs/kubernetes.md)",
    ),
]

IMAGE = os.environ.get("TRAINING_E2E_IMAGE", "training-base:latest")
SCRIPT = r'''
import json, os, socket
me = os.environ["TM_CURRENT_HOST"]
for host in json.loads(os.environ["TM_HOSTS"]):
    socket.getaddrinfo(host, 29500)  # containers on the job's network resolve each other by name
    print(f"{me} resolved {host}", flush=True)
if os.environ.get("SM_HP_MODE") == "fail":
    raise RuntimeError("planned failure on " + me)
open(os.path.join(os.environ["SM_MODEL_DIR"], me + ".txt"), "w").write(me)
print(f"{me} done", flush=True)
'''


def job_request(tmp_path: Path, hosts: int, mode: str = "ok"):
    from operators.hooks.docker_launcher import DockerLauncherHook
    from operators.hooks.launcher import LaunchRequest

    job_name = f"e2e-{mode}-{uuid.uuid4().hex[:5]}"
    hook = DockerLauncherHook(docker_url=DOCKER_URL, docker_conn_id="")
    names = hook.hosts(job_name, hosts)
    workspace = tmp_path / "workspace"
    root = workspace / "jobs" / job_name
    for sub in ("code", "input/config", "model", "output/data", "checkpoints"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "code" / "train.py").write_text(SCRIPT)
    config = root / "input" / "config"
    (config / "hyperparameters.json").write_text(json.dumps({"mode": mode}))
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": names[0], "hosts": names}))
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "File"}}))
    (config / "trainingjobconfig.json").write_text(
        json.dumps({"job_name": job_name, "layout": "ti", "entry_point": "train.py", "processes_per_host": 1})
    )
    entry = workspace / "cache" / "train-entry"
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "part-0.csv").write_text("x,y\n1,2\n")
    request = LaunchRequest(
        job_name=job_name,
        job_root=str(root),
        workspace=str(workspace),
        layout="ti",
        instance_count=hosts,
        hosts=tuple(names),
        channel_entries={"train": str(entry)},
        image_uri=IMAGE,
        resources={"cpu": "1", "memory": "512Mi"},
        max_run_seconds=600,
        env={"PYTHONUNBUFFERED": "1"},
        options={"poll_interval": 0.5},
    )
    return hook, request


def test_two_hosts_train_and_leave_nothing_behind(tmp_path):
    hook, request = job_request(tmp_path, hosts=2)
    lines: list[str] = []
    result = hook.run(request, lines.append)
    assert result.succeeded, (result.failure_reason, lines[-20:])
    assert sorted(p.name for p in Path(request.job_root, "model").iterdir()) == sorted(f"{h}.txt" for h in request.hosts)
    assert not hook._containers(request)


def test_a_failing_script_is_a_user_error(tmp_path):
    hook, request = job_request(tmp_path, hosts=2, mode="fail")
    result = hook.run(request, lambda line: None)
    assert result.failure_class == "user_error" and "planned failure" in result.failure_reason

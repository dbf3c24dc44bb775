"""Elastic training on the real Docker engine (training-torch, `make images`): two hosts of PyTorch DDP (gloo) under
torchrun's c10d rendezvous; one host's container is killed mid-training (`docker kill`, as the kernel's OOM killer or
a dying machine would end it), the launcher starts it again, the group re-forms and the script resumes from its
checkpoint: every step counted once in the model."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from dag_runner import ELASTIC_DDP, expected_weight
from docker_support import DOCKER_URL, TORCH_IMAGE, engine, require_image

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def make_request(tmp_path: Path, steps: int):
    from training_runtime.config import write_config_files
    from training_runtime.layouts import create_directories, layout_for

    from operators.launch.base import LaunchRequest
    from operators.launch.docker.launcher import DockerLauncherHook

    require_image(engine(), TORCH_IMAGE)
    job_name = f"dk-elastic-{uuid.uuid4().hex[:6]}"
    hook = DockerLauncherHook(docker_url=DOCKER_URL, docker_conn_id="")
    hosts = hook.hosts(job_name, 2)
    root = tmp_path / "workspace" / "jobs" / job_name
    layout = create_directories(layout_for("ti", root), [])
    (root / "code" / "train.py").write_text(ELASTIC_DDP)
    elastic = {"min_hosts": 2, "max_hosts": 2, "max_restarts": 2}
    write_config_files(layout, hyperparameters={"steps": steps},
                       resource_config={"current_host": hosts[0], "hosts": hosts}, input_data_config={},
                       job_config={"job_name": job_name, "layout": "ti", "entry_point": "train.py",
                                   "distribution": "pytorch", "master_port": hook.master_port(), "elastic": elastic})
    request = LaunchRequest(job_name=job_name, job_root=str(root), workspace=str(tmp_path / "workspace"), layout="ti",
                            instance_count=2, hosts=tuple(hosts), image_uri=TORCH_IMAGE,
                            resources={"cpu": "1", "memory": "2Gi"}, max_run_seconds=240,
                            env={"PYTHONUNBUFFERED": "1"}, options={"poll_interval": 0.3}, elastic=elastic)
    return hook, request, layout


def test_a_host_container_killed_mid_training_is_started_again_and_the_group_resumes(tmp_path):
    steps = 30
    hook, request, layout = make_request(tmp_path, steps)
    lines: list[str] = []
    outcome: dict = {}
    started = time.monotonic()
    runner = threading.Thread(target=lambda: outcome.setdefault("result", hook.run(request, lines.append)),
                              daemon=True)
    runner.start()
    second = request.hosts[1]
    deadline = time.monotonic() + 180
    while not any(line.startswith(f"[{second}] ") and " step=5 " in line for line in list(lines)):
        assert time.monotonic() < deadline and runner.is_alive(), "\n".join(lines[-40:])
        time.sleep(0.2)
    killed = time.monotonic()
    subprocess.run(["docker", "kill", second], check=True, capture_output=True)
    runner.join(timeout=240)
    assert not runner.is_alive(), "\n".join(lines[-40:])
    result = outcome["result"]
    assert result.succeeded, (result, "\n".join(lines[-60:]))
    text = "\n".join(lines)
    assert lines.count(f"[docker] elastic: {second} lost (exit code 137); starting its container again") == 1, text
    assert sum(line.startswith(f"[docker] elastic: {second} restarted (restart 1 of this host, at most 2)")
               for line in lines) == 1
    first = [line for line in lines if line.startswith(f"[{request.hosts[0]}] ")]
    assert sum("[train] elastic: the group re-formed" in line for line in first) == 1, "\n".join(first[-40:])
    assert any("resumed from checkpoint step" in line for line in first)
    rejoined = [line for line in lines if line.startswith(f"[{second}] ")]
    assert any("newest checkpoint state.pt" in line for line in rejoined)  # the restarted host said where from
    model = json.loads(Path(layout.model_dir, "model.json").read_text())
    assert model["step"] == steps and model["w"] == pytest.approx(expected_weight(steps), abs=1e-5)
    assert Path(layout.success_file).exists() and not Path(layout.failure_file).exists()
    print(f"\ndocker elastic, 2 hosts, one killed and restarted: {time.monotonic() - started:.1f}s "
          f"({time.monotonic() - killed:.1f}s after the kill)")

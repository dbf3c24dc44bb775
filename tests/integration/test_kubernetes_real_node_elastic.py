"""Elastic training on real pods (issue 38): a 3-host PyTorch DDP job (gloo, training-torch) with
`distribution: {"torch_distributed": {"elastic": ...}}`, run by the Kubernetes launcher as the launch stage runs it
(the job root written by write_job_configs from the validated spec, the Indexed Job, the watch streaming every pod's
log). The second pod is deleted mid-training: the Job replaces it (backoffLimitPerIndex), torchrun's c10d rendezvous
on host 0 re-forms the group with the replacement, the script resumes from its checkpoint and the model is the one an
uninterrupted run computes; the log says which host was lost, that it was replaced once, and where the group went on
from. The same job whose script fails on its own fails at once: no replacement pod, no torchrun restart.

The launcher is driven directly rather than through `airflow dags test` (the DAG's stages add a minute of Airflow per
run and nothing this feature changes; tests/operators/stages cover the request it builds). The cluster, the node and
the image import are the session's (tests/integration/real_node.py, test_kubernetes_real_node_ddp.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from dag_runner import ELASTIC_DDP, expected_weight
from test_kubernetes_real_node_ddp import torch_image  # noqa: F401 - the fixture: training-torch in containerd

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1200)]  # a first run imports the 5 GB image
STEPS = 30


def launch(job_name: str, image: str, **hyperparameters):
    """The job root as the stages leave it, and the LaunchRequest the launch stage builds from the validated spec."""
    from training_runtime.layouts import create_directories, layout_for

    from operators.launch.spec import validate_spec
    from operators.launch.base import LaunchRequest
    from operators.launch.job_configs import write_job_configs
    from operators.launch.kubernetes.launcher import KubernetesLauncherHook

    spec = validate_spec({
        "job_name": job_name, "backend": "kubernetes", "image_uri": image, "source_dir": "/unused",
        "output_path": "/unused", "entry_point": "train.py", "instance_count": 3,
        "distribution": {"torch_distributed": {"elastic": {"min_hosts": 2, "max_restarts": 2}}},
        "hyperparameters": {"steps": STEPS, **hyperparameters},
        # Three pods on the node's 2 cores: each asks for half a core, so all are scheduled at once.
        "resources": {"cpu": "500m", "memory": "1536Mi"}, "max_run_seconds": 600})
    hook = KubernetesLauncherHook()
    workspace = os.environ["AIRFLOW__TRAINING__WORKSPACE"]
    root = Path(workspace, "jobs", job_name)
    shutil.rmtree(root, ignore_errors=True)
    layout = create_directories(layout_for("ti", root), [])
    Path(layout.code_dir, "train.py").write_text(ELASTIC_DDP)
    hosts = write_job_configs(spec, layout, hook)
    request = LaunchRequest(job_name=job_name, job_root=str(root), workspace=workspace, layout="ti",
                            instance_count=3, hosts=tuple(hosts), image_uri=image,
                            resources=spec.resources.model_dump(exclude_none=True),
                            max_run_seconds=spec.max_run_seconds, env={}, options={"poll_interval": 1},
                            elastic=spec.elastic_settings())
    return hook, request, layout


def start(hook, request) -> tuple[threading.Thread, list[str], dict]:
    lines: list[str] = []
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("result", hook.run(request, lines.append)),
                              daemon=True)
    runner.start()
    return runner, lines, outcome


def pod_of_index(core, namespace: str, job: str, index: int):
    for pod in core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items:
        if (pod.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index") == str(index):
            return pod
    return None


def test_a_deleted_pod_of_a_three_host_elastic_job_is_replaced_and_the_training_resumes(
        real_namespace, real_admin, torch_image):  # noqa: F811
    core = real_admin["core"]
    hook, request, layout = launch("real-elastic", torch_image)
    started = time.monotonic()
    runner, lines, outcome = start(hook, request)
    deadline = time.monotonic() + 300
    while True:  # mid-training: host 1 has taken a few steps
        assert time.monotonic() < deadline and runner.is_alive(), "\n".join(lines[-60:])
        if any(line.startswith("[real-elastic-1] ") and " step=5 " in line for line in list(lines)):
            break
        time.sleep(0.5)
    victim = pod_of_index(core, real_namespace, "real-elastic", 1)
    deleted = time.monotonic()
    core.delete_namespaced_pod(victim.metadata.name, real_namespace)
    runner.join(timeout=420)
    assert not runner.is_alive(), "\n".join(lines[-60:])
    result = outcome["result"]
    text = "\n".join(lines)
    assert result.succeeded, (result, text[-6000:])
    assert result.restarts == {"real-elastic-1": 1}  # what the training-jobs view shows

    # Which host was lost, that it was replaced once, and from where the group went on.
    lost = [line for line in lines if line.startswith("[kubernetes] elastic: real-elastic-1 lost (pod "
                                                      f"{victim.metadata.name}")]
    restarted = [line for line in lines if line.startswith("[kubernetes] elastic: ") and " restarted: " in line]
    assert len(lost) == 1 and len(restarted) == 1, text[-6000:]
    assert restarted[0].startswith("[kubernetes] elastic: real-elastic-1 restarted: replacement pod real-elastic-1-")
    assert "(restart 1 of this host, at most 2)" in restarted[0]
    for host in ("real-elastic-0", "real-elastic-2"):  # the survivors: lost a peer, re-formed once, resumed
        own = [line for line in lines if line.startswith(f"[{host}] ")]
        assert sum("[train] elastic: lost a peer" in line for line in own) >= 1, "\n".join(own[-40:])
        assert sum("[train] elastic: the group re-formed" in line for line in own) == 1, "\n".join(own[-40:])
        assert any("Worker group FAILED" in line and "will restart worker group" in line for line in own) or \
            any("new nodes" in line for line in own)  # torchrun's own line about the restart
    assert re.search(r"\[real-elastic-\d\] rank=\d resumed from checkpoint step \d+", text)
    replacement = [line for line in lines if line.startswith("[real-elastic-1] ") and "newest checkpoint state.pt" in line]
    assert replacement, text[-6000:]

    model = json.loads(Path(layout.model_dir, "model.json").read_text())
    assert model["step"] == STEPS and model["w"] == pytest.approx(expected_weight(STEPS), abs=1e-5)
    assert Path(layout.success_file).exists() and not Path(layout.failure_file).exists()
    print("\n" + "\n".join(line[:300] for line in lines if "elastic" in line or "resumed" in line or
                           "will restart" in line))
    print(f"\nreal node, 3-host elastic DDP, pod 1 deleted and replaced: {time.monotonic() - started:.1f}s "
          f"({time.monotonic() - deleted:.1f}s after the deletion)")


def test_the_same_job_whose_script_fails_fails_at_once_without_a_restart(real_namespace, real_admin,
                                                                          torch_image):  # noqa: F811
    from operators.launch.base import USER_ERROR

    hook, request, layout = launch("real-elastic-fail", torch_image, fail=1)
    started = time.monotonic()
    runner, lines, outcome = start(hook, request)
    runner.join(timeout=420)
    assert not runner.is_alive(), "\n".join(lines[-60:])
    result = outcome["result"]
    text = "\n".join(lines)
    assert (result.succeeded, result.failure_class, result.exit_code) == (False, USER_ERROR, 1), (result, text[-4000:])
    assert "ValueError: learning rate must be positive" in result.failure_reason
    assert "elastic training does not restart it" in result.failure_reason
    assert "[kubernetes] elastic:" not in text  # no host lost, no replacement pod
    assert "will restart worker group" not in text and "[train] elastic: the group re-formed" not in text
    pods = set(re.findall(r"\(pod (real-elastic-fail-\d-\w+)\)", text))
    assert len(pods) == 3, pods  # one pod per host, none replaced
    print(f"\nreal node, 3-host elastic job whose script fails: failed after {time.monotonic() - started:.1f}s")

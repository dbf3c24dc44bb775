"""The first task's check of the job's backend (operators/jobspec/checks.py) against the real things, and through whole
training_job runs: a cluster or engine that is not there fails validate_spec within seconds, naming the field, once
(no retry), with nothing staged; a real control plane passes, and one that refuses the credentials says so."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
import yaml

from dag_runner import load_dag, run_dag
from operators.launch.kubernetes.checks import check_reachable
from operators.jobspec.errors import SpecError

pytestmark = pytest.mark.usefixtures("airflow_db")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.cluster
def test_the_real_control_plane_passes_and_refused_credentials_are_named(kube_namespace, kube_cluster, tmp_path,
                                                                          monkeypatch):
    check_reachable()  # the connection kube_namespace points at the local control plane
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": "not-a-token"}  # the API server's TLS and CA as they are, a credential it refuses
    bad = tmp_path / "kubeconfig"
    bad.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(bad)}}))
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        check_reachable()
    assert time.monotonic() - started < 15
    assert err.value.field == "backend" and "refuses the credentials of connection 'kubernetes_default' (401)" in str(
        err.value), err.value


@pytest.mark.parametrize("backend", ["docker", "kubernetes"])
def test_a_backend_that_is_not_there_fails_the_first_task_at_once_with_nothing_staged(backend, tmp_path, monkeypatch,
                                                                                         capfd):
    if backend == "docker":
        monkeypatch.setenv("AIRFLOW__TRAINING_DOCKER__DOCKER_URL", f"tcp://127.0.0.1:{closed_port()}")
        expected = "invalid job spec: backend: is docker but the Docker engine at tcp://127.0.0.1:"
    else:  # a kubeconfig naming an API server that is not running
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "x",
                  "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{closed_port()}"}}],
                  "users": [{"name": "u", "user": {"token": "t"}}],
                  "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}
        (tmp_path / "kubeconfig").write_text(json.dumps(config))
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(tmp_path / "kubeconfig")}}))
        expected = "invalid job spec: backend: is kubernetes but the cluster of connection 'kubernetes_default' does "
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('never runs')\n")
    job_name = f"absent-{backend}"
    result = run_dag(load_dag("training_job.py", "training_job"), {
        "job_name": job_name, "backend": backend, "image_uri": "training-base:latest", "source_dir": str(code),
        "entry_point": "train.py", "output_path": str(tmp_path / "out")})
    state, states, _ = result
    out = capfd.readouterr().out
    assert state == "failed" and states["validate_spec"] == "failed", states
    assert states["stage_code"] == states["launch_training"] == "upstream_failed", states
    assert "success" not in states.values() and list(states.values()).count("failed") == 1, states
    assert expected in out, out[-3000:]
    line = next(x for x in out.splitlines() if "invalid job spec:" in x)
    assert "Traceback" not in line
    workspace = os.environ["AIRFLOW__TRAINING__WORKSPACE"]
    assert not os.path.exists(os.path.join(workspace, "jobs", job_name))  # nothing staged
    assert not (tmp_path / "out").exists()

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.run_id == result.run_id,
                                                        TaskInstance.task_id == "validate_spec")).one()
        seconds = (ti.end_date - ti.start_date).total_seconds()
        assert ti.try_number == 1, "retried"  # AirflowFailException: a configuration mistake is not retried
    # The check itself answers in well under a second (a refused connection); the task's imports (Airflow, the docker
    # SDK, the Kubernetes client) take the rest, up to a minute when the shared machine is loaded. The bug this
    # guards against cost 612 s (staging, then two retries 5 minutes apart).
    assert seconds < 180, f"validate_spec took {seconds:.1f}s"
    print(f"\n{backend} not there: validate_spec failed in {seconds:.1f}s")

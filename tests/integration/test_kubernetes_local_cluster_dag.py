"""`airflow dags test training_job` with backend kubernetes against the real local control plane (tools/k8s):
the real API server with Pod Security admission and RBAC, the real Job, garbage-collector, TTL and endpointslice
controllers, the real scheduler; kwok plays the node and its kubelet, so a pod's container "runs" the way its
annotations say (tools/k8s/kwok/pod-stages.yaml) and its log is the cluster's CRI-format log file.

Each test is one CLI run (`python -m airflow dags test training_job --conf ...`), as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kube_cluster import PLAY
from operators.stages.failure_reasons import FAILURE_REASON_KEY

# Each test is an Airflow start-up plus a DAG run: ~1 min on an idle machine, 2-3 min on a loaded one.
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]


def dags_test(conf: dict, timeout: float = 540) -> tuple[str, dict, dict, str, float]:
    """Run the DAG from the CLI; returns (run state, {task: state}, {task: return value}, output, seconds)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "training_job", "--conf", json.dumps(conf)],
                          cwd=REPO, env=os.environ.copy(), capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - started
    state, run_conf, states, values = latest_run(key="return_value")
    assert run_conf.get("job_name") == conf["job_name"], proc.stdout[-3000:] + proc.stderr[-3000:]
    return state, states, values, proc.stdout + proc.stderr, seconds


def failure_reasons() -> dict:
    """The last run's failed tasks and the reason each recorded (XCom "failure_reason"): put first in a success
    assertion's message, where a CI summary that shortens long lines still shows it."""
    return latest_run(key=FAILURE_REASON_KEY)[3]


def latest_run(key: str):
    """The latest training_job run's state and conf ({} where there is none), {task: state}, {task: its XCom `key`}."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(select(DagRun).where(DagRun.dag_id == "training_job").order_by(DagRun.id.desc())).first()
        if run is None:
            return None, {}, {}, {}
        states = {ti.task_id: ti.state for ti in run.get_task_instances(session=session)}
        rows = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids="training_job", key=key)).all()
        return run.state, run.conf or {}, states, {row.task_id: XComModel.deserialize_value(row) for row in rows}


@pytest.fixture
def job_conf(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('kwok plays this container')\n")

    def conf(job_name: str, annotations: dict | None = None, **extra) -> dict:
        return {"job_name": job_name, "backend": "kubernetes", "image_uri": "training-base:latest",
                "source_dir": str(code), "entry_point": "train.py", "output_path": str(tmp_path / "out"),
                "resources": {"cpu": "1", "memory": "1Gi"},
                "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                "kubernetes": {"annotations": annotations or {}}, **extra}

    return conf


def log_lines(output: str) -> list[str]:
    """The pod log lines that reached the task log (kwok serves tools/k8s's numbered CRI log)."""
    return [line[line.index("line "):] for line in output.splitlines() if " line " in line and "/500 epoch=" in line]


def test_one_host_succeeds_with_every_log_line_once(kube_namespace, kube_admin, job_conf):
    state, states, values, output, seconds = dags_test(job_conf("kwok-one"))
    assert state == "success", (failure_reasons(), states, output[-4000:])
    lines = log_lines(output)
    expected = [f"line {i:04d}/500" for i in range(1, 501)]
    assert [line[:13] for line in lines] == expected, "a pod log line was lost or repeated"
    assert "naïve ✓ " + "x" * 4000 in output  # the long, multi-byte line arrives whole
    assert values["launch_training"]["metrics"] == {"loss": pytest.approx(0.002)}
    job = kube_admin["batch"].read_namespaced_job("kwok-one", kube_namespace)
    assert job.status.succeeded == 1
    print(f"one host: {seconds:.1f}s")


def test_four_hosts_each_log_prefixed_and_all_succeed(kube_namespace, kube_admin, job_conf):
    state, states, values, output, seconds = dags_test(job_conf("kwok-four", instance_count=4))
    assert state == "success", (failure_reasons(), states, output[-4000:])
    for index in range(4):
        ours = [line for line in output.splitlines() if f"[kwok-four-{index}]" in line and "/500 epoch=" in line]
        assert len(ours) == 500, f"host {index}: {len(ours)} log lines"
    pods = kube_admin["core"].list_namespaced_pod(kube_namespace, label_selector="job-name=kwok-four").items
    assert sorted(p.spec.hostname for p in pods) == [f"kwok-four-{i}" for i in range(4)]
    assert {p.spec.subdomain for p in pods} == {"kwok-four"}
    print(f"four hosts: {seconds:.1f}s")


def test_user_error_fails_once_with_the_exit_code_and_message(kube_namespace, job_conf):
    annotations = {PLAY + "exit-code": "1", PLAY + "message": "ValueError: learning rate must be positive"}
    state, states, _, output, seconds = dags_test(job_conf("kwok-user-error", annotations))
    assert state == "failed" and states["launch_training"] == "failed", states
    assert "ValueError: learning rate must be positive" in output
    assert "exit code 1" in output
    print(f"user error: {seconds:.1f}s")


def test_oom_killed_is_its_own_class(kube_namespace, job_conf):
    annotations = {PLAY + "exit-code": "137", PLAY + "reason": "OOMKilled"}
    state, states, _, output, seconds = dags_test(job_conf("kwok-oom", annotations))
    assert state == "failed" and states["launch_training"] == "failed", states
    assert "resources.memory" in output, output[-4000:]
    print(f"oom: {seconds:.1f}s")

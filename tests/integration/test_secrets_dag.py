"""Secrets by reference through the whole training_job DAG (issue 10): a Variable and a connection's password reach
the training script's environment, and nothing the run leaves behind holds them: not XCom, not the rendered
fields, not the task log (Airflow masks them), not the job root or the artifacts. Local backend always; docker on
the real engine when one runs here (tests/integration/docker_support.py says why it skips otherwise)."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import time
import textwrap
import uuid
from pathlib import Path

import pytest

from dag_runner import load_dag, run_dag

pytestmark = pytest.mark.usefixtures("airflow_db")

SCRIPT = textwrap.dedent('''
    import hashlib, json, os
    token, password = os.environ["WANDB_API_KEY"], os.environ["DB_PASSWORD"]
    print(f"token is {token}, password is {password}", flush=True)  # what a careless script does: masked
    digest = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in (("token", token), ("password", password))}
    with open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump(digest, f)
''')


ALLOW_BOTH = json.dumps({"training_job": {"variables": ["wandb_key"], "connections": ["warehouse"]}})


def stored_run_data(run_id: str) -> str:
    """Every XCom value and rendered template field of the run, as stored in the metadata DB."""
    from sqlalchemy import select

    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        xcoms = session.scalars(select(XComModel).where(XComModel.run_id == run_id)).all()
        rendered = session.scalars(select(RenderedTaskInstanceFields).where(
            RenderedTaskInstanceFields.run_id == run_id)).all()
        parts = [json.dumps(XComModel.deserialize_value(x), default=str) for x in xcoms]
        parts += [json.dumps(r.rendered_fields, default=str) for r in rendered]
        assert xcoms and rendered
        return "\n".join(parts)


def files_under(*roots: Path) -> dict[str, bytes]:
    found = {}
    for root in roots:
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_symlink():
                found[str(path)] = path.read_bytes()
    return found


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_secrets_by_reference_reach_the_script_and_nothing_else(backend, tmp_path, monkeypatch, capfd):
    if backend == "docker":
        from docker_support import TRAINING_IMAGE, engine, require_image

        require_image(engine(), TRAINING_IMAGE)
    token, password = f"tok-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW_VAR_WANDB_KEY", token)
    # the admin lets training_job runs reference both ([training] secret_references; default: none)
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES", ALLOW_BOTH)
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps(
        {"conn_type": "postgres", "host": "db.internal", "login": "trainer", "password": password}))
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT)
    job_name = f"secrets-{backend}"
    conf = {"job_name": job_name, "backend": backend, "source_dir": str(code), "entry_point": "train.py",
            "output_path": str(tmp_path / "models"),
            "environment": {"WANDB_API_KEY": {"variable": "wandb_key"},
                            "DB_PASSWORD": {"connection": "warehouse", "field": "password"}, "PLAIN": "visible"}}
    result = run_dag(load_dag("training_job.py", "training_job"), conf)
    state, states, _ = result
    log = capfd.readouterr()
    assert state == "success", (states, log.out[-3000:])

    # delivered: the script saw both values
    with tarfile.open(tmp_path / "models" / job_name / "output" / "model.tar.gz") as tar:
        seen = json.load(tar.extractfile("model.json"))
    assert seen == {"token": hashlib.sha256(token.encode()).hexdigest(),
                    "password": hashlib.sha256(password.encode()).hexdigest()}

    # and nowhere else
    stored = stored_run_data(result.run_id)
    assert "wandb_key" in stored and "warehouse" in stored  # the references are what travels
    workspace = Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"])
    files = files_under(workspace / "jobs" / job_name, tmp_path / "models", workspace / "state")
    assert files, "the job root was not found"
    task_log = log.out + log.err
    assert "token is ***, password is ***" in task_log
    for secret in (token, password):
        assert secret not in stored
        assert secret not in task_log
        assert not [path for path, data in files.items() if secret.encode() in data]


def kubernetes_case(tmp_path, monkeypatch, capfd, namespace: str, admin: dict, job_name: str, image: str) -> tuple:
    """One training_job run on kubernetes with a Variable and a connection password by reference: checks that the
    values are in the Secret owned by the Job and nowhere else (XCom, rendered fields, task log, job root, artifacts,
    the Job/Pod JSON), that deleting the Job deletes the Secret; returns (token, password, models dir, task log)."""
    import base64

    from operators.launch.names import JOB_LABEL

    core, batch, api = admin["core"], admin["batch"], admin["api"]
    token, password = f"tok-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW_VAR_WANDB_KEY", token)
    # the admin lets training_job runs reference both ([training] secret_references; default: none)
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES", ALLOW_BOTH)
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps(
        {"conn_type": "postgres", "host": "db.internal", "login": "trainer", "password": password}))
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT)
    conf = {"job_name": job_name, "backend": "kubernetes", "image_uri": image,
            "source_dir": str(code), "entry_point": "train.py", "output_path": str(tmp_path / "models"),
            "resources": {"cpu": "1", "memory": "512Mi"}, "kubernetes": {"keep_finished_jobs": True},
            "environment": {"WANDB_API_KEY": {"variable": "wandb_key"},
                            "DB_PASSWORD": {"connection": "warehouse", "field": "password"}, "PLAIN": "visible"}}
    started = time.monotonic()
    result = run_dag(load_dag("training_job.py", "training_job"), conf)
    seconds = time.monotonic() - started
    state, states, _ = result
    log = capfd.readouterr()
    assert state == "success", (states, log.out[-3000:])

    job = batch.read_namespaced_job(job_name, namespace)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={job_name}").items
    secret = core.read_namespaced_secret(f"{job_name}-env", namespace)
    assert {k: base64.b64decode(v).decode() for k, v in secret.data.items()} == {
        "WANDB_API_KEY": token, "DB_PASSWORD": password}
    assert [o.uid for o in secret.metadata.owner_references] == [job.metadata.uid]
    env = {e.name: e for e in pods[0].spec.containers[0].env}
    assert env["PLAIN"].value == "visible"
    assert {n: (env[n].value_from.secret_key_ref.name, env[n].value_from.secret_key_ref.key)
            for n in ("WANDB_API_KEY", "DB_PASSWORD")} == {
        "WANDB_API_KEY": (f"{job_name}-env", "WANDB_API_KEY"), "DB_PASSWORD": (f"{job_name}-env", "DB_PASSWORD")}

    stored = stored_run_data(result.run_id)
    assert "wandb_key" in stored and "warehouse" in stored
    workspace = Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"])
    files = files_under(workspace / "jobs" / job_name, tmp_path / "models")
    assert files, "the job root was not found"
    task_log = log.out + log.err
    assert f"Secrets DB_PASSWORD, WANDB_API_KEY: in Secret {namespace}/{job_name}-env" in task_log
    kube_objects = json.dumps([api.sanitize_for_serialization(o) for o in (job, *pods)])
    for secret_value in (token, password):
        assert secret_value not in stored
        assert secret_value not in task_log
        assert secret_value not in kube_objects
        assert not [path for path, data in files.items() if secret_value.encode() in data]

    # Deleting the Job (as the TTL controller or kubectl would) deletes its Secret: the garbage collector.
    batch.delete_namespaced_job(job_name, namespace, propagation_policy="Background")
    deadline = time.monotonic() + 30
    while core.list_namespaced_secret(namespace, label_selector=f"{JOB_LABEL}={job_name}").items:
        assert time.monotonic() < deadline, "the Secret outlived its Job"
        time.sleep(0.2)
    print(f"\nsecrets by reference on kubernetes ({job_name}): DAG run {seconds:.1f}s")
    return token, password, tmp_path / "models", task_log


@pytest.mark.cluster
def test_secrets_by_reference_on_kubernetes_live_only_in_the_jobs_secret(
        tmp_path, monkeypatch, capfd, kube_namespace, kube_admin):
    """kubernetes on the real control plane; kwok plays the kubelet, so no script runs here (the real node's test,
    test_secrets_dag_real_node.py, shows the script sees the values)."""
    kubernetes_case(tmp_path, monkeypatch, capfd, kube_namespace, kube_admin, "secrets-kubernetes",
                    "training-base:latest")

"""Secrets by reference through the whole training_job DAG (issue 10): a Variable and a connection's password reach
the training script's environment, and nothing the run leaves behind holds them: not XCom, not the rendered
fields, not the task log (Airflow masks them), not the job root or the artifacts. Local backend always; docker on
the real engine when one runs here (tests/integration/docker_support.py says why it skips otherwise)."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
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
    files = files_under(workspace / "jobs" / job_name, tmp_path / "models", workspace / ".secrets")
    assert files, "the job root was not found"
    task_log = log.out + log.err
    assert "token is ***, password is ***" in task_log
    for secret in (token, password):
        assert secret not in stored
        assert secret not in task_log
        assert not [path for path, data in files.items() if secret.encode() in data]

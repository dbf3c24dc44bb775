"""The served Airflow (the components of `make airflow`, started by tests/integration/airflow_server.py): a training_job
run triggered through the REST API is run to the end by the real scheduler, dag-processor and API server, with the
shared secrets (a task token the API server refused would fail every task with an empty log)."""

from __future__ import annotations

import json
import textwrap

import pytest
from airflow_server import airflow_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow

TRAIN = textwrap.dedent('''
    import argparse, json, os
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); p.add_argument("--epochs", type=int)
    args = p.parse_args()
    for epoch in range(args.epochs):
        print(f"epoch={epoch} loss={abs(args.lr - 0.3) + 1.0 / (epoch + 1):.4f} accuracy={0.5 + epoch / 20:.3f}", flush=True)
    open(os.path.join(os.environ["TM_MODEL_DIR"], "lr.txt"), "w").write(str(args.lr))
''')


def job_conf(tmp_path, name: str, **extra) -> dict:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(TRAIN)
    return {"job_name": name, "source_dir": str(code), "entry_point": "train.py",
            "output_path": str(tmp_path / "models"), "hyperparameters": {"lr": 0.25, "epochs": 4},
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"},
                                   {"Name": "accuracy", "Regex": "accuracy=([0-9.]+)"}], **extra}


def test_rest_triggered_training_job_succeeds_through_the_scheduler(airflow_server, tmp_path):
    conf = job_conf(tmp_path, "rest-ui-job")
    run = airflow_server.trigger("training_job", conf, run_id="rest-ui-job")
    run = airflow_server.wait_for_run("training_job", run["dag_run_id"])
    states = airflow_server.task_states("training_job", "rest-ui-job")
    assert run["state"] == "success", states
    assert set(states.values()) == {"success"}
    assert (tmp_path / "models/rest-ui-job/output/model.tar.gz").is_file()
    metrics = json.loads((tmp_path / "models/rest-ui-job/output/metrics.json").read_text())
    assert metrics["final"]["loss"] == pytest.approx(0.3)  # |0.25 - 0.3| + 1/4
    # the task log came through the API server (an empty log was the symptom of unshared secrets)
    status, log = airflow_server.api.call(
        "GET", "/api/v2/dags/training_job/dagRuns/rest-ui-job/taskInstances/launch_training/logs/1?full_content=true")
    assert status == 200 and "loss=0.3000" in json.dumps(log), log

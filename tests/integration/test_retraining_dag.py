"""Scheduled incremental retraining end to end: the DAG built from a YAML config by dags/retraining.py, run twice with
real Airflow (dag.test + metadata DB), the demo model (examples/logistic_regression) as real child processes, and the
loopback S3 server for code-free data, models and the latest-model pointer."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from dag_runner import REPO, load_dag, run_dag

pytestmark = pytest.mark.usefixtures("airflow_db")

CONFIG = """
dag_id: retrain_churn
description: churn model, retrained when new data lands
schedule:
  cron: "0 3 * * *"
  assets: ["s3://{bucket}/data/train/"]
job:
  base_job_name: churn
  source_dir: {code}
  entry_point: train.py
  hyperparameters: {{epochs: 10, learning_rate: 0.5}}
  inputs: {{train: "s3://{bucket}/data/train/"}}
  output_path: s3://{bucket}/models
  metric_definitions: [{{Name: loss, Regex: "loss=([0-9.]+)"}}, {{Name: accuracy, Regex: "accuracy=([0-9.]+)"}}]
gate:
  objective: loss
  direction: minimize
  threshold: 0.6
  better_than_current: true
"""


def csv_rows(seed: int, noisy: bool) -> bytes:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(400, 3))
    y = (x @ np.array([2.0, -1.5, 0.5]) > 0).astype(float)
    if noisy:  # the new data's labels are noise: the retrained model must get worse
        y = rng.integers(0, 2, size=len(y)).astype(float)
    out = io.StringIO()
    np.savetxt(out, np.hstack([x, y[:, None]]), delimiter=",", fmt="%.5f")
    return out.getvalue().encode()


@pytest.fixture
def retraining_config(tmp_path, monkeypatch, object_store):
    bucket = object_store.bucket()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "churn.yaml").write_text(CONFIG.format(bucket=bucket, code=REPO / "examples" / "logistic_regression"))
    monkeypatch.setenv("AIRFLOW__TRAINING__RETRAINING_CONFIGS", str(configs))
    return bucket


def model_asset_events(dag_id: str) -> list[dict]:
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == f"{dag_id}.model").order_by(AssetEvent.id)
        ).all()
        return [dict(row.extra or {}) for row in rows]


def test_config_becomes_a_dag_with_cron_and_asset_triggers(retraining_config):
    from airflow.sdk import AssetOrTimeSchedule

    dag = load_dag("retraining.py", "retrain_churn")
    assert isinstance(dag.timetable, AssetOrTimeSchedule)
    assert dag.timetable.timetable.expression == "0 3 * * *"
    assert [a.uri for a in dag.timetable.asset_condition.objects] == [f"s3://{retraining_config}/data/train"]
    assert dag.max_active_runs == 1
    assert list(dag.task_dict["promote_model"].outlets)[0].name == "retrain_churn.model"
    chain = ["current_model", "validate_spec", "stage_code", "prefetch_data", "write_configs", "restore",
             "launch_training", "upload_artifacts", "publish_model", "metric_gate", "promote_model"]
    for upstream, downstream in zip(chain, chain[1:]):
        assert upstream in dag.task_dict[downstream].upstream_task_ids


@pytest.mark.slow
def test_second_run_resumes_and_a_worse_model_is_not_promoted(retraining_config, storage_connections, object_store,
                                                              capfd):
    bucket = retraining_config
    object_store.put(bucket, "data/train/part-0.csv", csv_rows(1, noisy=False))

    state, states, values = run_dag(load_dag("retraining.py", "retrain_churn"))
    assert state == "success", states
    assert values["restore"]["resumed_from"] is None  # nothing promoted yet: a fresh start
    first = values["promote_model"]
    assert first.startswith(f"s3://{bucket}/models/churn-") and first.endswith("/output/model.tar.gz")
    gate = values["metric_gate"]
    assert gate["passed"] and gate["value"] < 0.6 and "no promoted model yet" in gate["reason"]
    pointer = object_store.get(bucket, "models/churn/latest.json")
    assert json.loads(pointer)["model_uri"] == first
    assert json.loads(pointer)["metrics"]["loss"] == pytest.approx(values["launch_training"]["metrics"]["loss"])
    assert [e["model_uri"] for e in model_asset_events("retrain_churn")] == [first]

    # New data lands; it is noise, so the model trained on it (from the promoted one) is worse.
    object_store.put(bucket, "data/train/part-0.csv", csv_rows(2, noisy=True))
    capfd.readouterr()
    state, states, values = run_dag(load_dag("retraining.py", "retrain_churn"))
    assert state == "success", states
    assert values["current_model"]["model_uri"] == first
    assert values["restore"]["resumed_from"] == first
    assert "incremental training from previous model" in capfd.readouterr().out
    gate = values["metric_gate"]
    assert not gate["passed"] and gate["current_value"] == pytest.approx(json.loads(pointer)["metrics"]["loss"])
    assert gate["value"] > gate["current_value"] and "not better than the promoted model" in gate["reason"]
    assert states["promote_model"] == "skipped" and "promote_model" not in values
    second = values["publish_model"]  # uploaded under its own job name, for inspection...
    assert second != first and second.split(bucket + "/")[1] in object_store.keys(bucket, "models/")
    assert object_store.get(bucket, "models/churn/latest.json") == pointer  # ...but the pointer stays
    assert [e["model_uri"] for e in model_asset_events("retrain_churn")] == [first]  # and no new Asset event

"""MLflow tracking end to end ([training] mlflow_tracking_uri): the retraining DAG (tests/integration/
test_retraining_dag.py's config) run with real Airflow (dag.test + metadata DB), the demo model as real child processes,
the loopback S3 server, and a real `mlflow server` (tests/mlflow_server.py) that then holds the job's run and the
promoted model version; and a training whose tracking server is down, which succeeds with a warning."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dag_runner import REPO, load_dag, run_dag

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minio_server import free_port  # noqa: E402

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]

CONFIG = """
dag_id: retrain_tracked
schedule: {{}}
job:
  base_job_name: tracked
  source_dir: {code}
  entry_point: train.py
  hyperparameters: {{epochs: 6, learning_rate: 0.5}}
  inputs: {{train: "s3://{bucket}/data/train/"}}
  output_path: s3://{bucket}/models
  metric_definitions: [{{Name: loss, Regex: "loss=([0-9.]+)"}}, {{Name: accuracy, Regex: "accuracy=([0-9.]+)"}}]
gate:
  objective: loss
  direction: minimize
  threshold: 0.9
"""


@pytest.fixture
def retraining_config(tmp_path, monkeypatch, object_store):
    from test_retraining_dag import csv_rows

    bucket = object_store.bucket()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "tracked.yaml").write_text(CONFIG.format(bucket=bucket, code=REPO / "examples" / "logistic_regression"))
    monkeypatch.setenv("AIRFLOW__TRAINING__RETRAINING_CONFIGS", str(configs))
    object_store.put(bucket, "data/train/part-0.csv", csv_rows(1, noisy=False))
    return bucket


@pytest.mark.slow
def test_a_retraining_run_is_an_mlflow_run_and_its_promotion_a_model_version(
        retraining_config, storage_connections, object_store, s3_server, mlflow_server, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__MLFLOW_TRACKING_URI", mlflow_server.url)
    result = run_dag(load_dag("retraining.py", "retrain_tracked"))
    state, states, values = result
    assert state == "success", states
    model_uri = values["promote_model"]
    job_name = values["validate_spec"]["job_name"]

    client = mlflow_server.client()
    experiment = client.get_experiment_by_name("tracked")  # the base job name
    runs = client.search_runs([experiment.experiment_id])
    assert [r.data.tags["training.job_name"] for r in runs] == [job_name]
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == job_name
    assert run.data.params == {"epochs": "6", "learning_rate": "0.5"}
    tags = run.data.tags
    assert tags["training.dag_id"] == "retrain_tracked" and tags["training.run_id"] == result.run_id
    assert tags["training.run_link"].endswith(f"/training-jobs/ui/#/job/retrain_tracked/"
                                              f"{result.run_id.replace(':', '%3A').replace('+', '%2B')}/-1")
    assert tags["training.model_uri"] == model_uri

    # The loss series as it was matched in the log, epoch by epoch, with its steps.
    history = client.get_metric_history(run.info.run_id, "loss")
    series = values["launch_training"]["metrics"]
    assert [m.step for m in history] == list(range(6))
    assert history[-1].value == pytest.approx(series["loss"])
    assert len(client.get_metric_history(run.info.run_id, "accuracy")) == 6
    reference = json.loads(Path(client.download_artifacts(run.info.run_id, "model/reference.json")).read_text())
    assert reference["model_uri"] == model_uri

    # promote_model: a version of the registered model named after the base job name, from this run.
    versions = client.search_model_versions("name = 'tracked'")
    assert [(v.source, v.run_id) for v in versions] == [(model_uri, run.info.run_id)]
    # ... that names what made the model and links, in one click, to the job's Lineage panel in the console
    version, link = versions[0], tags["training.lineage_link"]
    assert link.endswith("/lineage") and "/training-jobs/ui/#/job/retrain_tracked/" in link
    assert version.tags["training.lineage_link"] == link and f"[{link}]({link})" in version.description
    assert version.tags["training.code_digest"] == tags["training.code_digest"]
    assert tags["training.code_digest"].startswith("sha256:")
    assert [k for k in version.tags if k.startswith("training.data_version.")], version.tags

    # No credential of the job's connections reached MLflow.
    shown = json.dumps([run.data.params, run.data.tags, [v.tags for v in versions]])
    assert s3_server.secret_key not in shown and s3_server.access_key not in shown


@pytest.mark.slow
def test_a_tracking_server_that_is_down_never_fails_the_training(retraining_config, storage_connections,
                                                                 object_store, capfd, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")  # nobody there
    capfd.readouterr()
    state, states, values = run_dag(load_dag("retraining.py", "retrain_tracked"))
    assert state == "success", states
    assert states["promote_model"] == "success"
    out = capfd.readouterr()
    log = out.out + out.err
    # One warning per task that tried (launch, publish, promote); the metrics stay in metrics.json.
    assert log.count("MLflow tracking at http://127.0.0.1:") == 3, log[-4000:]
    assert "the training goes on and its metrics stay in metrics.json" in log
    job_name = values["validate_spec"]["job_name"]
    metrics = json.loads(object_store.get(retraining_config, f"models/{job_name}/output/metrics.json"))
    assert len(metrics["series"]["loss"]) == 6

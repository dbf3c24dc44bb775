"""operators/tracking/mlflow.py: against a real `mlflow server` (tests/mlflow_server.py) where the server matters,
and a closed port for a server that is down. The whole DAG path is tests/integration/test_mlflow_tracking_dag.py."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from minio_server import free_port
from operators.tracking.mlflow import (
    JobRun,
    experiment_name,
    metric_key,
    register_model_version,
    registered_model_name,
    shown_uri,
)

REPO = Path(__file__).resolve().parents[3]


def points(*values, start=0):
    return [{"value": v, "step": start + i, "timestamp": 1_800_000_000 + i} for i, v in enumerate(values)]


def job_run(uri: str, job_name: str = "job-a", run_id: str = "manual__1", **hyperparameters) -> JobRun:
    return JobRun(uri, experiment="unit", job_name=job_name, dag_id="training_job", run_id=run_id,
                  run_link="http://airflow/training-jobs/ui/#/job/x", hyperparameters=hyperparameters)


def test_metric_names_become_keys_mlflow_accepts():
    assert metric_key("system/cpu_percent") == "system/cpu_percent"
    assert metric_key("val loss (top-1)") == "val loss _top-1_"
    assert metric_key("/../etc/x") == "_/etc/x"


def test_the_admins_prefix_puts_the_dag_id_before_the_experiment_the_user_named(monkeypatch):
    assert experiment_name("churn", "training_job") == "churn"  # no prefix: today's behaviour
    assert experiment_name(None, "training_job") == "training_job"
    monkeypatch.setenv("AIRFLOW__TRAINING__MLFLOW_EXPERIMENT_PREFIX", "airflow/")
    # a user of training_job naming another team's experiment still writes under training_job's own
    assert experiment_name("team-b-churn", "training_job") == "airflow/training_job/team-b-churn"
    assert experiment_name(None, "nightly") == "airflow/nightly/nightly"
    # the promoted models' registry name is fenced the same way ('/' is not allowed in a registered model's name)
    assert registered_model_name("team-b-churn", "training_job") == "airflow.training_job.team-b-churn"
    monkeypatch.delenv("AIRFLOW__TRAINING__MLFLOW_EXPERIMENT_PREFIX")
    assert registered_model_name("churn", "retrain") == "churn"  # no prefix: today's name


def test_credentials_in_the_uri_are_never_shown():
    assert shown_uri("https://admin:s3cret@mlflow.example:5000/x") == "https://mlflow.example:5000/x"
    assert shown_uri("http://mlflow:5000") == "http://mlflow:5000"


@pytest.mark.slow
def test_a_retried_task_continues_the_run_without_sending_a_point_twice(mlflow_server):
    first = job_run(mlflow_server.url, "job-retried", lr=0.1)
    run_id = first.start()
    first.push({"loss": points(1.0, 0.5)})  # then the task dies

    again = job_run(mlflow_server.url, "job-retried", lr=0.1)
    assert again.start() == run_id
    again.finish({"loss": points(1.0, 0.5, 0.25), "system/memory_bytes": points(100.0)}, "FINISHED")

    client = mlflow_server.client()
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert [m.value for m in client.get_metric_history(run_id, "system/memory_bytes")] == [100.0]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1"}


@pytest.mark.slow
def test_the_specs_tags_are_run_tags_and_cannot_replace_the_platforms(mlflow_server):
    run = JobRun(mlflow_server.url, experiment="unit", job_name="job-tagged", dag_id="training_job",
                 run_id="manual__tags", run_link="", hyperparameters={},
                 tags={"team": "churn", "baseline": "", "training.dag_id": "other"})
    run_id = run.start()
    tags = mlflow_server.client().get_run(run_id).data.tags
    assert tags["team"] == "churn" and tags["baseline"] == ""
    assert tags["training.dag_id"] == "training_job"  # the platform's record wins over a spec that got past checks


@pytest.mark.slow
def test_a_later_job_reusing_the_name_starts_its_own_run(mlflow_server):
    """Only a retry of the same DAG run continues a run: another run's job of the same name never writes into it."""
    first = job_run(mlflow_server.url, "job-reused", run_id="manual__1")
    first_id = first.start()
    first.finish({"loss": points(1.0)}, "FINISHED")
    later = job_run(mlflow_server.url, "job-reused", run_id="manual__2")
    assert later.start() not in (None, first_id)
    later.push({"loss": points(9.0, 8.0)})
    client = mlflow_server.client()
    assert client.get_run(first_id).info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(first_id, "loss")] == [1.0]


@pytest.mark.slow
def test_a_local_model_is_registered_through_the_runs_model_reference(mlflow_server, tmp_path):
    from operators.tracking.mlflow import record_model

    run = job_run(mlflow_server.url, "job-local")
    run_id = run.start()
    model = str(tmp_path / "models" / "job-local" / "output" / "model.tar.gz")
    assert record_model(mlflow_server.url, experiment="unit", job_name="job-local", model_uri=model)
    version = register_model_version(mlflow_server.url, name="unit-local", experiment="unit", job_name="job-local",
                                     model_uri=model)
    registered = mlflow_server.client().get_model_version("unit-local", version)
    assert registered.source == f"runs:/{run_id}/model" and registered.run_id == run_id


def test_a_server_that_is_down_costs_one_warning_and_no_failure(caplog):
    run = job_run(f"http://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.WARNING, logger="operators.tracking.mlflow"):
        assert run.start() is None
        run.push({"loss": points(1.0)})
        run.finish({"loss": points(1.0)}, "FINISHED")
    warnings = [r.getMessage() for r in caplog.records if r.name == "operators.tracking.mlflow"]
    assert len(warnings) == 1 and "failed while starting the run" in warnings[0], warnings
    assert register_model_version(f"http://127.0.0.1:{free_port()}", name="m", experiment="e", job_name="j",
                                  model_uri="s3://b/m.tar.gz") is None


def test_parsing_the_dags_imports_no_mlflow(tmp_path):
    """The tracking client is the tasks' business: DAG parsing (every file of dags/) never imports it."""
    code = textwrap.dedent(f"""
        import runpy, sys, pathlib
        for path in sorted(pathlib.Path({str(REPO / 'dags')!r}).glob('*.py')):
            runpy.run_path(str(path))
        print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))
    """)
    env = {"AIRFLOW_HOME": str(tmp_path), "PYTHONPATH": f"{REPO}:{REPO / 'runtime'}",
           "AIRFLOW__TRAINING__MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin"}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", (out.stdout[-500:], time.monotonic() - started)

"""The hyperparameter_search DAG end to end: real Airflow (dag.test + metadata DB), a mapped task group of real training
jobs (`train` child processes), the median stopping rule across trials, the loopback S3 server for the artifacts."""

from __future__ import annotations

import json
import statistics
import textwrap

import pytest

from dag_runner import load_dag, run_dag

pytestmark = pytest.mark.usefixtures("airflow_db")

# Loss per step of four trials. dag.test() runs the trials one after another in an order it does not promise, and
# the median rule can only stop a trial that has others to compare with, so the curves cross: B, C and D each beat
# another one somewhere and lose to it elsewhere, hence in every order at least one of them is stopped. A is best at
# every step (never stopped) and has the best final loss.
CURVES = {"A": [1.0, 0.5, 0.3, 0.2], "B": [2.0, 0.9, 1.0, 1.1], "C": [2.0, 1.2, 0.8, 0.7], "D": [2.0, 1.0, 1.3, 0.6]}

TRIAL_SCRIPT = textwrap.dedent('''
    import argparse, json, os, time
    CURVES = %s
    p = argparse.ArgumentParser(); p.add_argument("--profile"); p.add_argument("--epochs", type=int)
    args = p.parse_args()
    for step, loss in enumerate(CURVES[args.profile][: args.epochs]):
        print(f"step={step} loss={loss}", flush=True)
        time.sleep(0.5)  # long enough for the launcher to stop it at this step
    json.dump({"profile": args.profile}, open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w"))
''' % json.dumps(CURVES))


@pytest.fixture
def search_dag():
    return load_dag("hyperparameter_search.py", "hyperparameter_search")


@pytest.mark.slow
def test_search_stops_a_trial_early_and_picks_the_best(search_dag, storage_connections, object_store, tmp_path,
                                                       airflow_home):
    bucket = object_store.bucket()
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRIAL_SCRIPT)
    conf = {
        "job_name": "hps",
        "source_dir": str(code),
        "entry_point": "train.py",
        "output_path": f"s3://{bucket}/search",
        "hyperparameters": {"epochs": 4},
        "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        "objective": "loss",
        "direction": "minimize",
        "strategy": "grid",
        "search_space": {"profile": ["B", "A", "C", "D"]},
        "max_trials": 4,
        "early_stopping": "median",
        "early_stopping_min_trials": 1,
        "early_stopping_grace_steps": 1,
    }
    result = run_dag(search_dag, conf)
    state, states, values = result
    assert state == "success", states
    by_map_index = mapped_states("hyperparameter_search", result.run_id)

    summary = values["summarize"]
    rows = {row["params"]["profile"]: row for row in summary["trials"]}
    assert [row["job_name"] for row in summary["trials"]] == ["hps-t01", "hps-t02", "hps-t03", "hps-t04"]
    assert rows["A"]["status"] == "completed" and rows["A"]["value"] == pytest.approx(0.2)
    assert summary["best"]["job_name"] == rows["A"]["job_name"] == "hps-t02"
    best_uri = f"s3://{bucket}/search/hps-t02/output/model.tar.gz"
    assert values["publish_best_model"] == best_uri == rows["A"]["model_uri"]

    stopped = [row for row in summary["trials"] if row["status"] == "stopped_early"]
    assert stopped, summary["table"]
    report_dir = airflow_home / "workspace" / "searches" / "hps"
    for row in stopped:
        decision = json.loads((report_dir / f"{row['job_name']}.stopped.json").read_text())
        # The rule, checked against what the other trials had reported at that step when it was applied.
        assert decision["step"] >= 1 and decision["others"]
        assert decision["value"] > statistics.median(decision["others"].values())
        profile = row["params"]["profile"]
        assert decision["value"] == CURVES[profile][decision["step"]]
        for other, value in decision["others"].items():
            assert value == CURVES[rows_by_job(summary)[other]["params"]["profile"]][decision["step"]]
        # stopped: no model, the series up to the stop and the reason are uploaded; the task was skipped, not failed
        assert row["model_uri"] is None and row["steps"] == decision["step"] + 1
        keys = object_store.keys(bucket, f"search/{row['job_name']}/")
        assert f"search/{row['job_name']}/output/model.tar.gz" not in keys
        reason = object_store.get(bucket, f"search/{row['job_name']}/output/failure").decode()
        assert reason.startswith("stopped early: median rule")
        # stopped early is not a failure: launch skipped, artifacts uploaded, nothing published
        i = row["index"]
        assert by_map_index[("trial.launch_training", i)] == "skipped"
        assert by_map_index[("trial.upload_artifacts", i)] == "success"
        assert by_map_index[("trial.publish_model", i)] == "skipped"
    for row in summary["trials"]:
        if row["status"] == "completed":
            assert by_map_index[("trial.launch_training", row["index"])] == "success"
            assert by_map_index[("trial.publish_model", row["index"])] == "success"
    assert {row["status"] for row in summary["trials"]} <= {"completed", "stopped_early"}

    assert json.loads(object_store.get(bucket, "search/hps/search_summary.json"))["best"]["job_name"] == "hps-t02"
    assert "hps-t02" in summary["table"] and "stopped_early" in summary["table"]


def rows_by_job(summary):
    return {row["job_name"]: row for row in summary["trials"]}


def mapped_states(dag_id: str, run_id: str) -> dict[tuple[str, int], str]:
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id))
        return {(ti.task_id, ti.map_index): ti.state for ti in tis}


def test_a_bad_search_space_fails_the_first_task_naming_the_field(search_dag, tmp_path, capfd):
    conf = {"source_dir": str(tmp_path), "entry_point": "train.py", "output_path": str(tmp_path / "out"),
            "search_space": {"lr": {"type": "log_uniform", "min": 0, "max": 1}}}
    result = run_dag(search_dag, conf)
    state, states, _ = result
    assert state == "failed" and states["plan_trials"] == "failed"
    assert "search field 'search_space.lr.min': a log_uniform range needs min > 0, got 0" in capfd.readouterr().out
    by_map_index = mapped_states("hyperparameter_search", result.run_id)
    assert by_map_index[("trial.validate_spec", -1)] == "upstream_failed"
    assert by_map_index[("summarize", -1)] == "failed" and by_map_index[("publish_best_model", -1)] == "upstream_failed"


def test_trials_take_the_configured_pool_and_concurrency_cap(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__TRIALS_POOL", "training_trials")
    monkeypatch.setenv("AIRFLOW__TRAINING__MAX_CONCURRENT_TRIALS", "3")
    launch = load_dag("hyperparameter_search.py").task_dict["trial.launch_training"]
    assert launch.pool == "training_trials" and launch.max_active_tis_per_dagrun == 3
    monkeypatch.delenv("AIRFLOW__TRAINING__TRIALS_POOL")
    launch = load_dag("hyperparameter_search.py").task_dict["trial.launch_training"]
    assert launch.pool == "default_pool" and launch.max_active_tis_per_dagrun == 3

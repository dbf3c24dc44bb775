"""The compare page's data (training_console/compare.py) from real Job records (training_console/jobs.py): the
selection a user may make, the differences marked, a search's objective and its best trial. The page itself, through
Airflow's nav entry in a real browser: tests/integration/test_compare_browser.py."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from fastapi import HTTPException

from training_console import compare
from training_console.jobs import Job

NOW = datetime(2026, 11, 26, tzinfo=timezone.utc)
DONE = {s: ("success", NOW, NOW, 1) for s in ("validate_spec", "launch_training", "upload_artifacts", "publish_model")}


def job(dag_id, run_id, map_index=-1, prefix="", conf=None, **spec) -> Job:
    spec = {"job_name": f"{run_id}-{map_index}", "backend": "local", "layout": "ti", "instance_count": 1, **spec}
    one = Job(dag_id=dag_id, run_id=run_id, map_index=map_index, prefix=prefix, conf=conf or {}, tis=dict(DONE),
              validated=spec)
    one.record_result("launch_training", {"metrics": {"loss": spec.get("_loss", 1.0)}})  # an older release's summary
    return one


JOBS = {
    ("training_job", "r1"): [job("training_job", "r1", hyperparameters={"lr": 0.1, "epochs": 5}, _loss=0.4)],
    ("training_job", "r2"): [job("training_job", "r2", hyperparameters={"lr": 0.3, "epochs": 5}, _loss=0.6)],
    ("hpo", "s1"): [job("hpo", "s1", i, prefix="trial.", conf={"objective": "loss", "direction": "minimize"},
                        hyperparameters={"lr": lr}, _loss=loss) for i, (lr, loss) in enumerate([(0.1, 0.5), (0.2, 0.3)])],
    ("secret_dag", "r9"): [job("secret_dag", "r9", hyperparameters={"lr": 9})],
}
READABLE = {"training_job", "hpo"}


def load(dag_id, run_id):
    return JOBS.get((dag_id, run_id), [])


def metrics_of(j: Job) -> dict:
    loss = j.spec["_loss"] if "_loss" in j.spec else 1.0
    return {"final": {"loss": loss}, "series": {"loss": [{"value": loss, "step": 0, "timestamp": 1.0}]}}


def test_two_jobs_side_by_side_with_the_differences_marked():
    chosen = compare.select(["training_job/r1/-1", "training_job/r2/-1"], [], READABLE, load)
    data = compare.compare(chosen, NOW, metrics_of)
    assert [j["label"] for j in data["jobs"]] == ["r1--1", "r2--1"]
    hps = {r["name"]: r for r in data["hyperparameters"]}
    assert hps["lr"] == {"name": "lr", "values": [0.1, 0.3], "differs": True}
    assert hps["epochs"]["differs"] is False
    fields = {r["name"]: r for r in data["fields"]}
    assert fields["backend"]["values"] == ["local", "local"] and not fields["backend"]["differs"]
    assert data["final"][0]["values"] == [0.4, 0.6] and data["objective"] is None
    assert data["jobs"][0]["series"]["loss"][0]["value"] == 0.4


def test_a_search_brings_all_its_trials_its_objective_and_the_best_marked():
    data = compare.compare(compare.select([], ["hpo/s1"], READABLE, load), NOW, metrics_of)
    assert [j["map_index"] for j in data["jobs"]] == [0, 1]
    assert data["objective"] == {"name": "loss", "direction": "minimize"}
    assert data["final"][0]["best"] == 1  # loss 0.3


def test_only_jobs_of_dags_the_user_may_read_and_unreadable_ones_look_absent():
    with pytest.raises(HTTPException) as refused:
        compare.select(["training_job/r1/-1", "secret_dag/r9/-1"], [], READABLE, load)
    with pytest.raises(HTTPException) as missing:
        compare.select(["training_job/r1/-1", "nowhere/r0/-1"], [], READABLE, load)
    assert refused.value.status_code == missing.value.status_code == 404
    assert "that you may read" in refused.value.detail


def test_a_bad_key_is_one_line_naming_the_expected_shape():
    with pytest.raises(HTTPException) as bad:
        compare.select(["training_job/r1"], [], READABLE, load)
    assert bad.value.status_code == 400 and "job=<dag_id>/<run_id>/<map_index>" in bad.value.detail
    with pytest.raises(HTTPException) as bad_index:
        compare.select(["training_job/r1/x"], [], READABLE, load)
    assert "map index must be an integer" in bad_index.value.detail


def test_url_encoded_run_ids_and_duplicates():
    JOBS[("training_job", "manual__2026-11-26T00:00:00+00:00")] = [job("training_job", "manual__2026-11-26T00:00:00+00:00")]
    key = "training_job/manual__2026-11-26T00%3A00%3A00%2B00%3A00/-1"
    chosen = compare.select([key, key], [], READABLE, load)
    assert [j.run_id for j in chosen] == ["manual__2026-11-26T00:00:00+00:00"]


def test_the_lineage_section_marks_the_parts_that_differ():
    from operators.launch.spec import validate_spec
    from operators.lineage.record import build_record

    def made(name, data_version, code, parent=None):
        conf = {"job_name": name, "source_dir": "s3://code/churn/", "entry_point": "train.py", "backend": "docker",
                "image_uri": "registry.example/churn:1", "inputs": {"train": "s3://data/train/"},
                "output_path": "s3://models", "hyperparameters": {"lr": 0.1}}
        return build_record(validate_spec(conf).to_dict(), dag_id="training_job", run_id=name, versions={},
                            code_digest=code, image_digest="sha256:" + "d" * 64,
                            channel_versions={"train": {"data_version": data_version}})

    records = {"r1": made("r1", "1" * 64, "sha256:aa"), "r2": made("r2", "2" * 64, "sha256:aa")}
    chosen = compare.select(["training_job/r1/-1", "training_job/r2/-1", "hpo/s1/0"], [], READABLE, load)
    data = compare.compare(chosen, NOW, metrics_of, lineage_of=lambda j: records.get(j.run_id))
    rows = {r["name"]: r for r in data["lineage"]}
    assert rows["data version train"] == {"name": "data version train", "values": ["1" * 64, "2" * 64, None],
                                          "differs": True}
    assert rows["code digest"]["values"] == ["sha256:aa", "sha256:aa", None]
    assert rows["image digest"]["values"][:2] == ["sha256:" + "d" * 64] * 2
    assert {"parent model", "image", "hyperparameter lr"} <= set(rows)
    assert data["lineage_missing"] == ["s1-0"]  # the trial has no kept record: said, not made up
    two = compare.compare(chosen[:2], NOW, metrics_of, lineage_of=lambda j: records.get(j.run_id))
    assert [r["name"] for r in two["lineage"] if r["differs"]] == ["data version train"]

"""operators/tracking/mlflow.py record_lineage, against a real `mlflow server` (tests/mlflow_server.py): the run lists
its channels through MLflow's dataset tracking (source = the channel URI, digest = its data version) and carries the
code digest, image digest and parent model as tags; a registered model version carries the same and links to the
console's Lineage panel of the job that made it."""

from __future__ import annotations

import json
import logging

import pytest

from minio_server import free_port
from operators.launch.spec import validate_spec
from operators.lineage.record import build_record, record_dict
from operators.tracking.mlflow import (
    CODE_DIGEST_TAG,
    DATA_VERSION_INPUT_TAG,
    IMAGE_DIGEST_TAG,
    LINEAGE_URI_TAG,
    PARENT_LINEAGE_TAG,
    PARENT_MODEL_TAG,
    LINEAGE_LINK_TAG,
    JobRun,
    record_lineage,
    record_model,
    register_model_version,
)

TRAIN, VALIDATION = "1" * 64, "2" * 64
PARENT = "s3://models/churn/churn-1/output/model.tar.gz"


def lineage(job_name: str) -> dict:
    job = validate_spec({"job_name": job_name, "source_dir": "s3://code/churn/", "entry_point": "train.py",
                         "inputs": {"train": "s3://data/churn/train/", "validation": "cos://eu/churn/val.csv"},
                         "output_path": "s3://models/churn", "resume_from": PARENT, "backend": "docker",
                         "image_uri": "registry.example/churn:1.4", "hyperparameters": {"lr": 0.1}}).to_dict()
    record = build_record(job, dag_id="training_job", run_id="manual__1", versions={},
                          code_digest="sha256:" + "c" * 64, image_digest="sha256:" + "d" * 64,
                          prefetch={"train": {"entry": f"/ws/cache/{TRAIN}/data", "uri": "s3://data/churn/train/"},
                                    "validation": {"entry": f"/ws/cache/{VALIDATION}/data",
                                                   "uri": "cos://eu/churn/val.csv"}},
                          channel_versions={"train": {"objects": 12, "bytes": 4096}},
                          restore={"checkpoint_files": 0, "resumed_from": PARENT})
    return record_dict(record)


def started_run(uri: str, job_name: str) -> str:
    run = JobRun(uri, experiment="lineage", job_name=job_name, dag_id="training_job", run_id="manual__1",
                 run_link="", hyperparameters={"lr": 0.1})
    return run.start()


@pytest.mark.slow
def test_the_run_lists_its_datasets_and_carries_code_image_and_parent(mlflow_server):
    run_id = started_run(mlflow_server.url, "job-lineage")
    record = lineage("job-lineage")
    assert record_lineage(mlflow_server.url, experiment="lineage", job_name="job-lineage", record=record,
                          run_id="manual__1")

    run = mlflow_server.client().get_run(run_id)
    inputs = {i.dataset.name: i for i in run.inputs.dataset_inputs}
    assert set(inputs) == {"train", "validation"}
    train = inputs["train"]
    assert json.loads(train.dataset.source) == {"uri": "s3://data/churn/train/"}
    assert train.dataset.source_type == "s3" and inputs["validation"].dataset.source_type == "cos"
    assert train.dataset.digest == TRAIN[:36]  # MLflow keeps 36 characters of a digest
    tags = {t.key: t.value for t in train.tags}
    assert tags[DATA_VERSION_INPUT_TAG] == TRAIN and tags["mlflow.data.context"] == "train"
    assert json.loads(train.dataset.profile) == {"data_version": TRAIN, "objects": 12, "bytes": 4096}
    run_tags = run.data.tags
    assert run_tags[CODE_DIGEST_TAG] == "sha256:" + "c" * 64
    assert run_tags[IMAGE_DIGEST_TAG] == "sha256:" + "d" * 64
    assert run_tags[PARENT_MODEL_TAG] == PARENT
    assert run_tags[PARENT_LINEAGE_TAG] == "s3://models/churn/churn-1/output/lineage.json"
    assert run_tags[LINEAGE_URI_TAG] == "s3://models/churn/job-lineage/output/lineage.json"


@pytest.mark.slow
def test_recording_it_again_after_a_retry_lists_each_dataset_once(mlflow_server):
    run_id = started_run(mlflow_server.url, "job-lineage-retried")
    record = lineage("job-lineage-retried")
    for _ in range(2):
        assert record_lineage(mlflow_server.url, experiment="lineage", job_name="job-lineage-retried", record=record)
    run = mlflow_server.client().get_run(run_id)
    assert sorted(i.dataset.name for i in run.inputs.dataset_inputs) == ["train", "validation"]


def test_a_server_that_is_down_costs_one_warning_and_no_failure(caplog):
    with caplog.at_level(logging.WARNING):
        assert not record_lineage(f"http://127.0.0.1:{free_port()}", experiment="e", job_name="j",
                                  record=lineage("job-down"))
    [warning] = [r for r in caplog.records if r.name == "operators.tracking.mlflow"]
    assert "failed while recording the lineage of job j" in warning.getMessage()


@pytest.mark.slow
def test_a_registered_version_names_code_data_and_image_and_links_to_the_jobs_lineage(mlflow_server, monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080")
    run = JobRun(mlflow_server.url, experiment="lineage", job_name="job-registered", dag_id="training_job",
                 run_id="manual__1", run_link="", hyperparameters={"lr": 0.1}, map_index=-1)
    run_id = run.start()
    model = "s3://models/churn/job-registered/output/model.tar.gz"
    assert record_model(mlflow_server.url, experiment="lineage", job_name="job-registered", model_uri=model)
    assert record_lineage(mlflow_server.url, experiment="lineage", job_name="job-registered",
                          record=lineage("job-registered"), run_id="manual__1")
    version = register_model_version(mlflow_server.url, name="lineage-registered", experiment="lineage",
                                     job_name="job-registered", model_uri=model, run_id="manual__1")
    client = mlflow_server.client()
    registered = client.get_model_version("lineage-registered", version)
    # one click from the registry: the job's page in the console, scrolled to its Lineage panel
    link = "http://airflow.example:8080/training-jobs/ui/#/job/training_job/manual__1/-1/lineage"
    assert registered.tags[LINEAGE_LINK_TAG] == link and f"[{link}]({link})" in registered.description
    assert client.get_run(run_id).data.tags[LINEAGE_LINK_TAG] == link  # the run links there too
    assert registered.tags[CODE_DIGEST_TAG] == "sha256:" + "c" * 64
    assert registered.tags[IMAGE_DIGEST_TAG] == "sha256:" + "d" * 64
    assert registered.tags["training.data_version.train"] == TRAIN
    assert registered.tags["training.data_version.validation"] == VALIDATION
    assert registered.tags[PARENT_MODEL_TAG] == PARENT and registered.run_id == run_id
    for fact in ("sha256:" + "c" * 64, TRAIN, VALIDATION, "registry.example/churn:1.4", "sha256:" + "d" * 64):
        assert fact in registered.description

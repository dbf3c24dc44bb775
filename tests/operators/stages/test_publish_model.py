"""The publish_model stage: the model URI is the pipeline's result; a run without a model fails saying why."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from operators.stages.publish_model import PublishModelOperator


def test_the_uploaded_model_is_published():
    upload = {"status": "succeeded", "model_uri": "s3://b/models/j/output/model.tar.gz", "artifacts": {}}
    assert PublishModelOperator(task_id="publish", upload=upload).execute({"run_id": "r"}) == upload["model_uri"]


@pytest.mark.parametrize("upload", [None, {"status": "failed", "model_uri": None}])
def test_nothing_to_publish_fails_naming_the_launch_task(upload):
    with pytest.raises(AirflowFailException, match="no model to publish: training did not succeed"):
        PublishModelOperator(task_id="publish", upload=upload).execute({"run_id": "r"})


@pytest.mark.slow
def test_with_tracking_on_the_job_s_run_gets_the_published_lineage(mlflow_server, monkeypatch, tmp_path, local_job):
    from operators.lineage.record import build_record, write_record
    from operators.settings import training_settings
    from operators.tracking.mlflow import CODE_DIGEST_TAG, LINEAGE_URI_TAG, JobRun, experiment_name

    monkeypatch.setenv("AIRFLOW__TRAINING__MLFLOW_TRACKING_URI", mlflow_server.url)
    job = local_job(inputs={"train": "s3://data/train/"})
    model_uri = f"{job['output_path']}/{job['job_name']}/output/model.tar.gz"
    record = build_record(job, dag_id="training_job", run_id="run-1", code_digest="sha256:" + "c" * 64,
                          prefetch={"train": {"entry": "/w/cache/x/data", "uri": "s3://data/train/",
                                              "data_version": "a" * 64, "files": 2, "bytes": 9}},
                          upload={"status": "succeeded", "model_uri": model_uri}, versions={})
    kept = write_record(training_settings().workspace, record)
    op = PublishModelOperator(task_id="publish", job=job, upload={
        "status": "succeeded", "model_uri": model_uri, "artifacts": {}, "lineage_uri": kept})
    run_id = JobRun(mlflow_server.url, experiment=experiment_name(job.get("base_job_name"), op.dag_id),
                    job_name=job["job_name"], dag_id=op.dag_id, run_id="run-1", run_link="",
                    hyperparameters={}).start()
    assert op.execute({"run_id": "run-1"}) == model_uri
    run = mlflow_server.client().get_run(run_id)
    assert [i.dataset.name for i in run.inputs.dataset_inputs] == ["train"]
    assert run.data.tags[CODE_DIGEST_TAG] == "sha256:" + "c" * 64
    assert run.data.tags[LINEAGE_URI_TAG] == record.published_uri

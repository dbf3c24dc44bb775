import pytest
from airflow.models.taskinstancekey import TaskInstanceKey

from operators.console_urls import base_url, console_url
from operators.stages.links import ALL_LINKS, FailureReasonLink, ModelArtifactsLink, TrainingJobLink, stage_links
from operators.stages import LaunchTrainingOperator, PublishModelOperator, UploadArtifactsOperator


@pytest.mark.parametrize("uri, link", [
    ("s3://b/models/j/output/model.tar.gz", "https://s3.console.aws.amazon.com/s3/buckets/b?prefix=models/j/output/"),
    ("cos://b/models/j/output/model.tar.gz", "https://console.cloud.tencent.com/cos/bucket?bucket=b&path=/models/j/output/"),
    ("/data/models/j/output/model.tar.gz", None),  # local: served by the plugin, never a file:// URL
    ("file:///data/models/j/output/model.tar.gz", None),
])
def test_console_url_opens_the_folder_of_the_object(uri, link):
    assert console_url(uri) == link


def test_links_point_at_the_plugin_on_the_served_base_url(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    key = TaskInstanceKey("hyperparameter_search", "trial.launch_training", "manual__2026-11-23T03:00:00+00:00", 1, 2)
    base = "https://airflow.example.com/training-jobs"
    job = "hyperparameter_search/manual__2026-11-23T03%3A00%3A00%2B00%3A00/2"
    assert ModelArtifactsLink().get_link(None, ti_key=key) == f"{base}/api/jobs/{job}/artifacts/model.tar.gz"
    assert FailureReasonLink().get_link(None, ti_key=key) == f"{base}/api/jobs/{job}/artifacts/failure"
    # the job in Airflow's own UI: the run's Training jobs tab
    assert TrainingJobLink().get_link(None, ti_key=key) == (
        "https://airflow.example.com/dags/hyperparameter_search/runs/manual__2026-11-23T03%3A00%3A00%2B00%3A00/plugin/"
        "training-jobs-run")


def test_without_base_url_the_links_use_the_api_host_and_port(monkeypatch):
    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    monkeypatch.setenv("AIRFLOW__API__HOST", "0.0.0.0")
    monkeypatch.setenv("AIRFLOW__API__PORT", "8080")
    assert base_url() == "http://127.0.0.1:8080"


def test_launch_upload_and_publish_show_every_link():
    names = [link.name for link in stage_links()]
    assert names == ["Training job", "Model", "Metrics", "Failure reason", "Host logs"]
    for operator in (LaunchTrainingOperator, UploadArtifactsOperator, PublishModelOperator):
        assert [type(link) for link in operator.operator_extra_links] == list(ALL_LINKS)


class RunningTask:
    """The task instance the worker hands to get_link when the task ends."""

    def __init__(self, task_id, state, outcome=None, map_index=-1):
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = "training_job", "r1", task_id, map_index, 1
        self.state, self.outcome, self.pulled = state, outcome, []

    def xcom_pull(self, task_ids, key, map_indexes):
        self.pulled.append((task_ids, key, map_indexes))
        return self.outcome


def test_the_failure_reason_link_is_offered_only_where_the_job_failed():
    link = FailureReasonLink()
    assert link.get_link(None, ti_key=RunningTask("publish_model", "success")) == ""
    failed_training = RunningTask("trial.upload_artifacts", "success", {"succeeded": False, "failure_class": "user_error"},
                                  map_index=2)
    assert link.get_link(None, ti_key=failed_training).endswith("/training-jobs/api/jobs/training_job/r1/2/artifacts/failure")
    assert failed_training.pulled == [("trial.launch_training", "outcome", 2)]
    assert link.get_link(None, ti_key=RunningTask("stage_code", "failed")).endswith("/artifacts/failure")

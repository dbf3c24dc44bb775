import pytest
from airflow.models.taskinstancekey import TaskInstanceKey

from operators.links import (ALL_LINKS, FailureReasonLink, ModelArtifactsLink, TrainingJobLink, base_url, console_url,
                             stage_links)
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

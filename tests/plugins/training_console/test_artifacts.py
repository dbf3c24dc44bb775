"""How a job's artifacts reach a browser: against the loopback S3 server of tests/conftest.py (real HTTP, real
signatures) and real files."""

import json
import logging
import os
from urllib.parse import parse_qs, urlparse

from fastapi.responses import RedirectResponse, StreamingResponse

from training_console import artifacts


def test_object_storage_artifacts_redirect_to_a_short_lived_presigned_url(object_store, storage_connections, moto_server,
                                                                        caplog):
    bucket = object_store.bucket()
    object_store.put(bucket, "models/j1/output/model.tar.gz", b"model bytes")
    spec = {"job_name": "j1", "output_path": f"cos://{bucket}/models"}
    with caplog.at_level(logging.INFO):  # the level Airflow logs at
        response = artifacts.respond(spec, "model.tar.gz")
    assert isinstance(response, RedirectResponse) and response.status_code == 307
    url = response.headers["location"]
    query = parse_qs(urlparse(url).query)
    assert query["X-Amz-Expires"] == ["900"] and "X-Amz-Signature" in query
    assert moto_server.secret_key not in url
    # The URL is boto3's own presigning, aimed at the connection's endpoint, and the store serves it as it is.
    assert url.startswith(storage_connections["cos_default"] + f"/{bucket}/models/j1/output/model.tar.gz?")
    from urllib.request import urlopen

    with urlopen(url, timeout=30) as followed:
        assert followed.read() == b"model bytes"
    assert query["X-Amz-Signature"][0] not in caplog.text  # the signed URL is never logged


def test_console_mode_redirects_to_the_provider_console(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__ARTIFACT_LINKS", "console")
    response = artifacts.respond({"job_name": "j1", "output_path": "cos://b/models"}, "model.tar.gz")
    assert response.headers["location"] == "https://console.cloud.tencent.com/cos/bucket?bucket=b&path=/models/j1/output/"


def body(response) -> bytes:
    import asyncio

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.body_iterator])

    return asyncio.run(read())


def test_local_artifacts_are_served_by_the_plugin(tmp_path):
    out = tmp_path / "models" / "j2" / "output"
    out.mkdir(parents=True)
    (out / "failure").write_text("ValueError: bad learning rate\n")
    spec = {"job_name": "j2", "output_path": str(tmp_path / "models")}
    response = artifacts.respond(spec, "failure")
    assert isinstance(response, StreamingResponse) and body(response) == b"ValueError: bad learning rate\n"
    try:
        artifacts.respond(spec, "model.tar.gz")
        raise AssertionError("a missing model must be a 404")
    except Exception as err:  # noqa: BLE001
        assert getattr(err, "status_code", None) == 404 and "does not exist" in err.detail


def test_running_jobs_show_live_metrics_from_the_job_root(tmp_path):
    from operators.settings import training_settings

    root = training_settings().job_root("live-job")
    os.makedirs(os.path.join(root, "output"), exist_ok=True)
    with open(os.path.join(root, "output", "metrics.json"), "w") as f:
        json.dump({"final": {"loss": 0.5}, "series": {"loss": [{"value": 0.9, "step": 0}, {"value": 0.5, "step": 1}]}}, f)
    with open(os.path.join(root, "output", "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"name": "val_loss", "value": 0.7, "step": 1}) + "\n")
    spec = {"job_name": "live-job", "output_path": str(tmp_path)}
    live = artifacts.metrics(spec, live=True)
    assert [p["value"] for p in live["series"]["loss"]] == [0.9, 0.5] and live["final"]["val_loss"] == 0.7
    assert "val_loss" not in artifacts.metrics(spec, live=False)["series"]  # the final metrics.json already has them


def test_a_job_whose_root_is_in_the_cluster_shows_the_series_its_launch_task_recorded(tmp_path):
    """The cluster's data plane: no job root and no metrics.json on this side; the launch task's XCom has the curves
    (and every point is checked as a metrics.json's would be)."""
    recorded = {"final": {"loss": 0.25}, "series": {"loss": [{"value": 0.5, "step": 0}, {"value": 0.25, "step": 1}],
                                                     "bad": [{"value": "DROP TABLE", "step": 0}]}}
    spec = {"job_name": "in-the-cluster", "output_path": str(tmp_path / "nothing-uploaded")}
    shown = artifacts.metrics(spec, live=False, recorded=recorded)
    assert [p["value"] for p in shown["series"]["loss"]] == [0.5, 0.25] and shown["final"] == {"loss": 0.25}
    assert "bad" not in shown["series"]
    assert artifacts.metrics(spec, live=False)["series"] == {}


def test_the_view_reads_no_link_the_job_left_in_its_root(tmp_path):
    """Issue 23: a Viewer must not get a file outside the job through links at output/failure or metrics.json."""
    from operators.settings import training_settings

    secret = tmp_path / "airflow-secrets.env"
    secret.write_text(json.dumps({"series": {"JWT_SECRET_do_not_leak": [{"value": 1.0, "step": 0}]}}))
    root = training_settings().job_root("linked-job")
    os.makedirs(os.path.join(root, "output"), exist_ok=True)
    for name in ("failure", "metrics.json", "metrics.jsonl"):
        os.symlink(secret, os.path.join(root, "output", name))
    spec = {"job_name": "linked-job", "output_path": "s3://bucket/models"}
    assert artifacts.failure_reason(spec, {}, "failed") is None
    assert artifacts.metrics(spec, live=True)["series"] == {}
    try:
        response = artifacts.respond(spec, "metrics.json")
    except Exception:  # noqa: BLE001 - no storage connection here: what matters is that the link was not served
        response = None
    assert not isinstance(response, StreamingResponse)

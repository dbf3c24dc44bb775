"""The upload_artifacts stage: after success the model goes to <output_path>/<job>/output/, once; after a failure the
reason does and no model."""

from __future__ import annotations

import os
import tarfile

from operators.stages.stage_code import StageCodeOperator
from operators.stages.upload_artifacts import UploadArtifactsOperator


def _trained(job: dict, outcome: str, text: str = "") -> str:
    """The job root as `train` leaves it: output/<outcome>, and a model after success."""
    root = os.path.dirname(StageCodeOperator(task_id="stage_code", job=job).execute({"run_id": "run-1"})["code_dir"])
    os.makedirs(os.path.join(root, "output"), exist_ok=True)
    os.makedirs(os.path.join(root, "model"), exist_ok=True)
    if outcome == "success":
        with open(os.path.join(root, "model", "weights.bin"), "w") as handle:
            handle.write("w")
    with open(os.path.join(root, "output", outcome), "w") as handle:
        handle.write(text)
    return root


def test_a_successful_jobs_model_is_uploaded_once_and_a_retry_sends_nothing_again(tmp_path, local_job):
    job = local_job()
    _trained(job, "success")

    result = UploadArtifactsOperator(task_id="upload", job=job).execute({"run_id": "run-1"})

    model = tmp_path / "models" / job["job_name"] / "output" / "model.tar.gz"
    assert result["status"] == "succeeded" and os.path.realpath(result["model_uri"].removeprefix("file://")) == \
        os.path.realpath(model)
    with tarfile.open(model) as archive:
        assert "weights.bin" in [os.path.normpath(n) for n in archive.getnames()]
    uploaded_at = model.stat().st_mtime_ns
    retry = UploadArtifactsOperator(task_id="upload", job=job).execute({"run_id": "run-1"})
    assert retry["model_uri"] == result["model_uri"] and model.stat().st_mtime_ns == uploaded_at


def test_a_failed_job_uploads_its_reason_and_no_model(tmp_path, local_job):
    job = local_job()
    _trained(job, "failure", "ValueError: bad batch size\n")

    result = UploadArtifactsOperator(task_id="upload", job=job).execute({"run_id": "run-1"})

    out = tmp_path / "models" / job["job_name"] / "output"
    assert result["status"] == "failed" and result["model_uri"] is None
    assert "bad batch size" in result["failure"]
    assert (out / "failure").read_text() == "ValueError: bad batch size\n"
    assert not (out / "model.tar.gz").exists()

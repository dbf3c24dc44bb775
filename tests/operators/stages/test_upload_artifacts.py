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


def test_hard_links_in_model_are_published_and_kept_once(tmp_path, local_job):
    # Issue 47: 32 MiB plus 31 hard links of it were packed as 1.1 GB, and that archive kept in the state directory.
    from operators.state.job_state import ARTIFACTS, state_path

    job = local_job()
    root = _trained(job, "success")
    weights = os.urandom(4 * 1024 * 1024)
    with open(os.path.join(root, "model", "weights.bin"), "wb") as handle:
        handle.write(weights)
    for i in range(31):
        os.link(os.path.join(root, "model", "weights.bin"), os.path.join(root, "model", f"copy-{i:02d}.bin"))

    UploadArtifactsOperator(task_id="upload", job=job).execute({"run_id": "run-1"})

    model = tmp_path / "models" / job["job_name"] / "output" / "model.tar.gz"
    kept = state_path(UploadArtifactsOperator(task_id="u", job=job).settings.workspace, job["job_name"], ARTIFACTS)
    assert model.stat().st_size < 5 * 1024 * 1024  # one copy, not 32
    assert os.path.getsize(os.path.join(kept, "model.tar.gz")) < 5 * 1024 * 1024
    with tarfile.open(model) as archive:
        assert all(archive.extractfile(f"copy-{i:02d}.bin").read() == weights for i in range(31))


def test_a_model_claiming_more_than_its_disk_cap_is_not_packed(tmp_path, local_job):
    # Sparse files hold nothing and claim anything: packing reads their zeros, so what is packed is bounded by the
    # job's disk cap (resources.disk here), with one line.
    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    job = local_job(resources={"disk": "64Mi"})
    root = _trained(job, "success")
    for i in range(4):
        with open(os.path.join(root, "model", f"sparse-{i}.bin"), "wb") as handle:
            handle.truncate(32 * 1024 * 1024)  # 128 MiB claimed in all, no block held

    with pytest.raises(AirflowFailException) as err:
        UploadArtifactsOperator(task_id="upload", job=job).execute({"run_id": "run-1"})

    assert str(err.value).startswith("cannot pack model.tar.gz: the files of model/ add up to more than the job's disk "
                                     "cap of 64.0 MiB (model/sparse-2.bin (33554432 bytes)")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "models" / job["job_name"] / "output" / "model.tar.gz").exists()

"""The upload stage's engine function on a local store: what goes to the job's output after success and after
failure, what a retry sends again (nothing), and the skips and failures it reports."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from operators.engine import transfers
from operators.engine.errors import StageFailed, StageSkipped
from operators.engine.results import UploadedArtifacts
from operators.engine.upload import upload_artifacts
from operators.job_outputs import job_output_uri
from operators.lineage.record import LineageRecord, read_record, record_path


def _trained(ctx, *, succeeded: bool) -> None:
    transfers.stage_code(ctx)
    os.makedirs(ctx.layout.model_dir, exist_ok=True)
    with open(os.path.join(ctx.layout.model_dir, "weights.bin"), "w") as handle:
        handle.write("w")
    os.makedirs(ctx.layout.output_dir, exist_ok=True)
    with open(os.path.join(ctx.layout.output_dir, "success" if succeeded else "failure"), "w") as handle:
        handle.write("" if succeeded else "the script raised ValueError\n")


def test_a_successful_job_s_model_and_metrics_go_to_its_output(make_context):
    ctx = make_context()
    _trained(ctx, succeeded=True)
    metrics = {"final": {"loss": 0.1}, "series": {"loss": [{"value": 0.1, "step": 0, "timestamp": 1.0}]}}
    done = upload_artifacts(ctx, metrics=metrics)
    out = job_output_uri(ctx.spec.output_path, ctx.spec.job_name)
    assert done == UploadedArtifacts("succeeded", {"model.tar.gz": out + "model.tar.gz",
                                                   "metrics.json": out + "metrics.json"}, model_uri=out + "model.tar.gz",
                                     lineage_uri=out + "lineage.json",
                                     lineage_sha256=hashlib.sha256(open(out + "lineage.json", "rb").read()).hexdigest())
    assert os.path.isfile(out + "model.tar.gz")
    assert json.loads(open(out + "metrics.json").read()) == metrics
    assert UploadedArtifacts.from_dict(json.loads(json.dumps(done.to_dict()))) == done
    assert "failure" not in done.to_dict()

    mtime = os.stat(out + "model.tar.gz").st_mtime_ns
    assert upload_artifacts(ctx) == done  # a retry: the same result, nothing sent again
    assert os.stat(out + "model.tar.gz").st_mtime_ns == mtime


def test_a_failed_job_s_reason_goes_up_and_never_a_model(make_context):
    ctx = make_context()
    _trained(ctx, succeeded=False)
    done = upload_artifacts(ctx)
    out = job_output_uri(ctx.spec.output_path, ctx.spec.job_name)
    assert done.status == "failed" and done.model_uri is None and done.failure.strip() == "the script raised ValueError"
    assert done.to_dict()["artifacts"] == {"failure": out + "failure"}
    assert not os.path.exists(out + "model.tar.gz")


def test_nothing_to_upload_is_a_skip(make_context):
    ctx = make_context()
    with pytest.raises(StageSkipped, match="never created"):
        upload_artifacts(ctx)
    transfers.stage_code(ctx)
    with pytest.raises(StageSkipped, match="training did not run"):
        upload_artifacts(ctx)


def test_a_model_another_run_published_is_never_overwritten(make_context):
    ctx = make_context()
    _trained(ctx, succeeded=True)
    out = job_output_uri(ctx.spec.output_path, ctx.spec.job_name)
    os.makedirs(out)
    with open(out + "model.tar.gz", "w") as handle:
        handle.write("someone else's")
    with pytest.raises(StageFailed, match="never overwritten"):
        upload_artifacts(ctx)
    assert open(out + "model.tar.gz").read() == "someone else's"


def test_the_run_s_lineage_is_kept_in_its_state_and_published_beside_the_model(make_context, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.csv").write_text("1,2\n")
    ctx = make_context(inputs={"train": str(data)}, hyperparameters={"epochs": 3})
    _trained(ctx, succeeded=True)
    stage_results = {"stage_code": transfers.stage_code(ctx).to_dict(),
                     "prefetch": transfers.prefetch_data(ctx).to_dict(),
                     "launch": {"succeeded": True, "exit_code": 0, "metrics": {"loss": 0.25}, "failure_class": None}}
    done = upload_artifacts(ctx, stage_results=stage_results, triggering_user="alice")
    out = job_output_uri(ctx.spec.output_path, ctx.spec.job_name)
    assert done.lineage_uri == out + "lineage.json"
    published = LineageRecord.from_json(open(out + "lineage.json").read())
    assert published == read_record(ctx.settings.workspace, ctx.spec.job_name)  # the kept copy, outside the job root
    assert not record_path(ctx.settings.workspace, ctx.spec.job_name).startswith(ctx.layout.root)
    assert published.code.digest == stage_results["stage_code"]["code_digest"]
    assert published.code.digest.startswith("sha256:")
    train = published.channels["train"]
    assert train.data_version == stage_results["prefetch"]["train"]["data_version"] and len(train.data_version) == 64
    assert (train.objects, train.bytes) == (1, len("1,2\n"))
    assert published.outcome.status == "succeeded" and published.outcome.model_uri == done.model_uri
    assert published.outcome.final_metrics == {"loss": 0.25}
    assert published.hyperparameters == {"epochs": 3}
    assert (published.airflow.dag_id, published.airflow.run_id, published.airflow.triggering_user) == (
        "training_job", "r1", "alice")
    assert (published.image.backend, published.image.name, published.image.digest) == ("local", None, None)
    assert upload_artifacts(ctx, stage_results=stage_results).lineage_uri == done.lineage_uri  # a retry: again


def test_a_failed_run_publishes_its_lineage_too_and_missing_stage_results_leave_their_part_empty(make_context):
    ctx = make_context()
    _trained(ctx, succeeded=False)
    done = upload_artifacts(ctx, stage_results={"stage_code": None, "launch": None})
    published = LineageRecord.from_json(open(done.lineage_uri).read())
    assert published.outcome.status == "failed" and published.outcome.model_uri is None
    assert published.code.digest is None and published.code.source_uri == ctx.spec.source_dir


def test_results_no_record_can_be_built_from_are_a_warning_and_the_upload_goes_on(make_context, caplog):
    ctx = make_context()
    _trained(ctx, succeeded=True)
    done = upload_artifacts(ctx, stage_results={"launch": {"metrics": {"loss": "not a number"}}})
    assert done.status == "succeeded" and done.lineage_uri is None
    assert "Could not build the lineage record" in caplog.text


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_the_lineage_names_the_image_digest_the_backend_ran_a_failed_launch_s_from_its_outcome(make_context):
    ctx = make_context(backend="docker")  # no image_uri: [training] default_image, as the launch request names it
    _trained(ctx, succeeded=False)
    outcome = {"succeeded": False, "exit_code": 1, "metrics": {}, "failure_class": "user_error", "image_digest": DIGEST}
    done = upload_artifacts(ctx, stage_results={"launch": outcome})
    published = LineageRecord.from_json(open(done.lineage_uri).read())
    assert (published.image.backend, published.image.name, published.image.digest) == (
        "docker", ctx.settings.default_image, DIGEST)
    assert published.outcome.status == "failed"


def test_a_local_run_names_no_image_whatever_its_spec_says(make_context):
    ctx = make_context(image_uri="training-base:latest")  # the local backend runs no image: the spec's is not used
    _trained(ctx, succeeded=True)
    done = upload_artifacts(ctx, stage_results={"launch": {"succeeded": True, "exit_code": 0, "metrics": {}}})
    published = LineageRecord.from_json(open(done.lineage_uri).read())
    assert (published.image.backend, published.image.name, published.image.digest) == ("local", None, None)

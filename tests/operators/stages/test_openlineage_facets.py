"""Each stage's OpenLineage hook (get_openlineage_facets_on_complete, what the real openlineage provider calls after the
task): stage_code reports the code with the digest it staged, prefetch_data each channel with its data version, the
upload and publish_model the model with all it was made from; and a lineage that cannot be built never fails a task."""

from __future__ import annotations

from types import SimpleNamespace

from airflow.providers.openlineage.extractors import OperatorLineage

from operators.lineage.code_digest import code_digest
from operators.lineage.openlineage import LINEAGE_FACET
from operators.lineage.record import build_record, write_record
from operators.settings import training_settings
from operators.stages.prefetch_data import PrefetchDataOperator
from operators.stages.publish_model import PublishModelOperator
from operators.stages.stage_code import StageCodeOperator
from operators.stages.upload_artifacts import UploadArtifactsOperator

TI = SimpleNamespace(run_id="run-1")


def test_stage_code_and_prefetch_report_the_code_digest_and_the_channels_data_versions(tmp_path, local_job):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.csv").write_text("1\n2\n")
    job = local_job(inputs={"train": str(data)})
    stage = StageCodeOperator(task_id="stage_code", job=job)
    staged = stage.execute({"run_id": "run-1"})
    lineage = stage.get_openlineage_facets_on_complete(TI)
    assert isinstance(lineage, OperatorLineage) and lineage.outputs == []
    [code] = lineage.inputs
    assert (code.namespace, code.name) == ("file", str(tmp_path / "code"))
    assert code.facets["version"].datasetVersion == code_digest(staged["code_dir"]).digest

    prefetch = PrefetchDataOperator(task_id="prefetch_data", job=job)
    channels = prefetch.execute({"run_id": "run-1"})
    [train] = prefetch.get_openlineage_facets_on_complete(TI).inputs
    assert train.name == str(data) and train.facets["version"].datasetVersion == channels["train"]["data_version"]
    assert train.inputFacets["inputStatistics"].fileCount == 1 and train.inputFacets["inputStatistics"].size == 4


def test_the_upload_reports_the_model_made_from_the_code_and_the_channels(local_job):
    job = local_job(inputs={"train": "s3://data/train/"})
    staged = {"code_dir": "/w/code", "files": 1, "bytes": 3, "code_digest": "sha256:" + "c" * 64}
    prefetched = {"train": {"entry": "/w/cache/x/data", "is_file": False, "uri": "s3://data/train/",
                            "file_name": None, "data_version": "a" * 64, "files": 2, "bytes": 9}}
    op = UploadArtifactsOperator(task_id="upload_artifacts", job=job,
                                 stage_results={"stage_code": staged, "prefetch": prefetched, "launch": None})
    model_uri = job["output_path"] + f"/{job['job_name']}/output/model.tar.gz"
    op._stage_result = {"status": "succeeded", "model_uri": model_uri, "artifacts": {}, "lineage_uri": None}
    lineage = op.get_openlineage_facets_on_complete(TI)
    assert [d.facets["version"].datasetVersion for d in lineage.inputs] == [staged["code_digest"], "a" * 64]
    [model] = lineage.outputs
    assert model.name == model_uri
    assert model.facets[LINEAGE_FACET].codeDigest == staged["code_digest"]
    assert model.facets[LINEAGE_FACET].dataVersions == {"train": "a" * 64}


def test_a_lineage_that_cannot_be_built_is_a_warning_never_a_failed_task(local_job, capsys):
    job = local_job()
    op = StageCodeOperator(task_id="stage_code", job={**job, "inputs": "not a mapping"})
    op._stage_result = {"code_dir": "/w/code", "files": 1, "bytes": 3, "code_digest": None}
    assert op.get_openlineage_facets_on_complete(TI) is None
    assert "Could not build the OpenLineage datasets of stage stage_code" in capsys.readouterr().out
    assert StageCodeOperator(task_id="stage_code", job=None).get_openlineage_facets_on_complete(TI) is None


def test_publish_model_reports_the_record_the_upload_published(tmp_path, local_job, capsys):
    job = local_job()
    record = build_record(job, dag_id="training_job", run_id="run-1", code_digest="sha256:" + "c" * 64,
                          upload={"status": "succeeded", "model_uri": str(tmp_path / "m" / "model.tar.gz")},
                          versions={})
    kept = write_record(training_settings().workspace, record)
    upload = {"status": "succeeded", "model_uri": record.outcome.model_uri, "artifacts": {}, "lineage_uri": kept}
    op = PublishModelOperator(task_id="publish_model", upload=upload, job=job)
    assert op.execute({"run_id": "run-1"}) == record.outcome.model_uri
    [model] = op.get_openlineage_facets_on_complete(TI).outputs
    assert model.facets[LINEAGE_FACET].codeDigest == "sha256:" + "c" * 64

    gone = PublishModelOperator(task_id="publish_model", job=job,
                                upload={**upload, "lineage_uri": str(tmp_path / "gone" / "lineage.json")})
    assert gone.execute({"run_id": "run-1"}) == record.outcome.model_uri
    assert gone.get_openlineage_facets_on_complete(TI) is None
    assert "Could not read the run's lineage record" in capsys.readouterr().out

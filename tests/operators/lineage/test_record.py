"""operators/lineage/record.py: the lineage record built from the spec and today's stage results, its JSON, where it is
kept (platform state, never the job root) and published (beside model.tar.gz), and the versions it names."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from operators.jobspec.model import JobSpec
from operators.lineage import record as lineage_record
from operators.lineage.record import (
    LineageError,
    LineageRecord,
    build_record,
    carried_record,
    keep_carried,
    kept_sha256,
    lineage_uri_beside,
    platform_versions,
    publish_record,
    published_uri,
    read_record,
    record_path,
    record_summary,
    write_record,
)
from operators.settings import TrainingSettings
from operators.storage.hook import ObjectStorageHook

REPO = Path(__file__).resolve().parents[3]


def test_the_record_names_code_data_image_parent_and_outcome(sample):
    record = sample.sample_record()
    assert record.schema_version == 1
    assert record.code.source_uri == "s3://code/churn/v3/" and record.code.digest == sample.CODE_DIGEST
    assert (record.code.files, record.code.bytes) == (4, 2048)  # stage_code's result
    # the data version is the cache entry's key: given by prefetch's entry path today (<cache>/<key>/data)
    assert record.data_versions == {"train": sample.TRAIN_VERSION, "validation": sample.VALIDATION_VERSION}
    assert (record.channels["train"].objects, record.channels["train"].bytes) == (120, 10_000_000)
    assert record.channels["validation"].uri == "cos://eu-data/churn/validation.csv"
    assert record.hyperparameters == {"lr": 0.01, "epochs": 3, "optimizer": "adam"}
    assert (record.image.backend, record.image.name, record.image.digest) == (
        "docker", "registry.example/churn:1.4", sample.IMAGE_DIGEST)
    assert record.resources.instance_count == 2 and record.resources.gpu == 1
    assert record.resources.hosts == ["algo-1", "algo-2"]
    assert record.parent.model_uri == sample.PARENT_MODEL
    assert record.parent.lineage_uri == "s3://models/churn/churn-20260101-000000-abcd/output/lineage.json"
    assert record.outcome.status == "succeeded" and record.outcome.final_metrics == {"loss": 0.25, "accuracy": 0.91}
    assert record.outcome.model_uri.endswith("/churn-20260202-010203-beef/output/model.tar.gz")
    assert (record.airflow.dag_id, record.airflow.owner, record.airflow.triggering_user) == (
        "training_job", "alice", "alice")
    assert record.reproduces is None
    assert "code sha256:ccc" in record_summary(record) and "train@aaaaaaaaaaaa" in record_summary(record)


def test_it_is_published_beside_the_model(sample):
    job = sample.sample_job()
    record = sample.sample_record(job=job)
    spec = JobSpec.from_dict(job)
    assert record.published_uri == published_uri(spec) == spec.job_output_uri + "lineage.json"
    assert record.published_uri == "s3://models/churn/churn-20260202-010203-beef/output/lineage.json"
    assert lineage_uri_beside(record.outcome.model_uri) == record.published_uri
    assert lineage_uri_beside("s3://b/some/other.tar.gz") is None and lineage_uri_beside(None) is None


def test_the_record_round_trips_through_json(sample):
    record = sample.sample_record(reproduces={"job_name": "churn-20260101-000000-abcd", "dag_id": "training_job",
                                              "run_id": "manual__1"})
    text = record.to_json()
    document = json.loads(text)
    assert document["schema_version"] == 1
    assert document["channels"]["train"]["data_version"] == sample.TRAIN_VERSION
    assert document["reproduces"]["job_name"] == "churn-20260101-000000-abcd"
    again = LineageRecord.from_json(text)
    assert again == record
    assert again.to_json() == text


def test_a_document_of_another_version_or_shape_is_refused_in_one_line(sample):
    document = json.loads(sample.sample_record().to_json())
    with pytest.raises(LineageError) as err:
        LineageRecord.from_json(json.dumps({**document, "schema_version": 2}))
    assert str(err.value) == "not a lineage record: schema_version: Value error, is 2; this platform reads version 1"
    with pytest.raises(LineageError, match=r"^not a lineage record: code.digest: "):
        LineageRecord.from_json(json.dumps({**document, "code": {**document["code"], "digest": 7}}))
    with pytest.raises(LineageError, match="^not a lineage record: document: "):
        LineageRecord.from_json("not json")
    with pytest.raises(LineageError, match="^not a lineage record: surprise: "):
        LineageRecord.from_json(json.dumps({**document, "surprise": 1}))


def test_a_run_that_failed_early_records_what_it_knows_and_guesses_nothing(sample):
    job = sample.sample_job(resume_from="latest")
    record = build_record(job, dag_id="training_job", run_id="manual__2", versions={})
    assert record.code.digest is None and record.code.files is None
    assert record.data_versions == {"train": None, "validation": None}
    assert record.channels["train"].uri == "s3://data/churn/train/"
    assert record.image.digest is None
    assert record.parent.requested == "latest" and record.parent.model_uri is None and record.parent.lineage_uri is None
    assert record.outcome.status == "unknown" and record.outcome.model_uri is None
    failed = build_record(job, dag_id="training_job", run_id="manual__2", versions={},
                          launch={"succeeded": False, "exit_code": 1, "metrics": {}, "failure_class": "user_error"},
                          upload={"status": "failed", "model_uri": None, "artifacts": {}})
    assert (failed.outcome.status, failed.outcome.failure_class, failed.outcome.exit_code) == ("failed", "user_error", 1)


def test_a_prefetch_result_with_the_cache_entrys_key_and_sizes_gives_them_itself(sample):
    results = sample.stage_results()
    results["prefetch"]["train"] = {**results["prefetch"]["train"], "entry": "/elsewhere/data", "key": "e" * 64,
                                    "files": 3, "bytes": 30}
    record = sample.sample_record(prefetch=results["prefetch"], channel_versions=None)
    assert record.channels["train"].data_version == "e" * 64
    assert (record.channels["train"].objects, record.channels["train"].bytes) == (3, 30)


def test_an_sdk_upload_records_its_archive_address(sample):
    sha = "f" * 64
    record = sample.sample_record(job=sample.sample_job(source_dir=f"s3://code/staging/{sha}.tar.gz"))
    assert record.code.archive_sha256 == sha


def test_the_record_is_kept_in_platform_state_not_the_job_root(sample, tmp_path):
    workspace = str(tmp_path / "ws")
    record = sample.sample_record()
    path = write_record(workspace, record)
    assert path == record_path(workspace, record.job_name)
    assert Path(path).parent == tmp_path / "ws" / "state" / record.job_name  # beside jobs/, never inside a job root
    assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
    assert read_record(workspace, record.job_name) == record
    assert read_record(workspace, "no-such-job") is None


def test_publishing_uploads_the_kept_copy_beside_the_model(sample, tmp_path):
    output = tmp_path / "models"
    job = sample.sample_job(output_path=str(output), source_dir=str(tmp_path / "code"), inputs={})
    record = sample.sample_record(job=job, prefetch={}, channel_versions={})
    storage = ObjectStorageHook(settings=TrainingSettings(workspace=str(tmp_path / "ws")))
    uri = publish_record(storage, str(tmp_path / "ws"), record)
    published = output / record.job_name / "output" / "lineage.json"
    assert uri == str(published)
    assert LineageRecord.from_json(published.read_text()) == record


def test_versions_name_the_installed_distributions():
    versions = platform_versions()
    assert versions["apache-airflow"] == metadata.version("apache-airflow")
    assert versions["apache-airflow-providers-openlineage"] == metadata.version("apache-airflow-providers-openlineage")
    assert versions["python"] == sys.version.split()[0]


def test_the_platform_run_from_a_checkout_names_the_checkouts_commit():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    versions = platform_versions()
    for name in ("airflow-training-jobs", "airflow-training-jobs-runtime"):
        assert versions[name] == f"{metadata.version(name)}+g{head.stdout.strip()[:12]}"
    assert versions["apache-airflow"] == metadata.version("apache-airflow")  # an installed wheel: its version alone


def test_a_platform_run_from_the_checkout_names_the_checkouts_version_and_commit(monkeypatch):
    real = metadata.version

    def not_installed(name):
        if name == "airflow-training-jobs":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(lineage_record.metadata, "version", not_installed)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    assert platform_versions()["airflow-training-jobs"] == f"0.1.0+g{head.stdout.strip()[:12]}"


def test_importing_the_lineage_package_imports_neither_airflow_nor_openlineage():
    code = ("import sys, operators.lineage.record, operators.lineage.openlineage, operators.lineage.code_digest; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'openlineage')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "runtime"), str(REPO / "sdk")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]"


def test_a_worker_keeps_the_carried_record_only_when_it_is_what_the_upload_published(sample, tmp_path):
    """The cluster's data plane keeps the record in the cluster's workspace; its upload step carries it to the worker
    (compressed, in the step's result) with the sha256 of what it published, and the worker keeps it only if it is
    that record."""
    output = tmp_path / "models"
    job = sample.sample_job(output_path=str(output), source_dir=str(tmp_path / "code"), inputs={})
    record = sample.sample_record(job=job, prefetch={}, channel_versions={})
    cluster, worker = str(tmp_path / "cluster-ws"), str(tmp_path / "worker-ws")
    publish_record(ObjectStorageHook(settings=TrainingSettings(workspace=cluster)), cluster, record)
    sha256 = kept_sha256(cluster, record.job_name)
    packed = carried_record(cluster, record.job_name, room=4096)
    assert packed and len(packed) < len(record.to_json())  # compressed: it must fit a termination message
    assert carried_record(cluster, record.job_name, room=10) is None
    with pytest.raises(LineageError, match="not 'another-job''s"):
        keep_carried(worker, packed, sha256, "another-job")  # never into another job's state
    assert read_record(worker, "another-job") is None
    assert keep_carried(worker, packed, sha256, record.job_name) == record
    assert read_record(worker, record.job_name) == record

    other = str(tmp_path / "other-ws")
    for bad, why in ((packed, "is not the one the upload published"), ("not base64!", "cannot be read")):
        with pytest.raises(LineageError, match=why):
            keep_carried(other, bad, sha256 if bad is not packed else "0" * 64, record.job_name)
    assert read_record(other, record.job_name) is None

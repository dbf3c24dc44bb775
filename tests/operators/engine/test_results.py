"""The typed results: to_dict() is the XCom the stage always returned (the keys the pipelines, the console and the SDK
read), and each round-trips through JSON."""

from __future__ import annotations

import json

import pytest

from operators.engine.results import (
    LaunchSummary, Restored, StagedChannel, StagedChannels, StagedCode, UploadedArtifacts, WrittenConfigs, read_result,
)

CASES = [
    (StagedCode("/w/jobs/a/code", 2, 10), {"code_dir": "/w/jobs/a/code", "files": 2, "bytes": 10, "code_digest": None}),
    (StagedCode("/w/jobs/a/code", 2, 10, "sha256:" + "c" * 64),
     {"code_dir": "/w/jobs/a/code", "files": 2, "bytes": 10, "code_digest": "sha256:" + "c" * 64}),
    (StagedChannels({"train": StagedChannel("/w/cache/x/data", False, "s3://b/train/", None)}),
     {"train": {"entry": "/w/cache/x/data", "is_file": False, "uri": "s3://b/train/", "file_name": None,
                "data_version": None, "files": None, "bytes": None}}),
    (StagedChannels({"train": StagedChannel("/w/cache/x/data", True, "s3://b/t.csv", "t.csv", "d" * 64, 1, 7)}),
     {"train": {"entry": "/w/cache/x/data", "is_file": True, "uri": "s3://b/t.csv", "file_name": "t.csv",
                "data_version": "d" * 64, "files": 1, "bytes": 7}}),
    (WrittenConfigs(("algo-1", "algo-2"), "/w/jobs/a/input/config"),
     {"hosts": ["algo-1", "algo-2"], "config_dir": "/w/jobs/a/input/config"}),
    (Restored(3, None), {"checkpoint_files": 3, "resumed_from": None}),
    (UploadedArtifacts("succeeded", {"model.tar.gz": "s3://o/a/output/model.tar.gz"}, "s3://o/a/output/model.tar.gz"),
     {"status": "succeeded", "model_uri": "s3://o/a/output/model.tar.gz",
      "artifacts": {"model.tar.gz": "s3://o/a/output/model.tar.gz"}, "lineage_uri": None, "lineage_sha256": None}),
    (UploadedArtifacts("succeeded", {"model.tar.gz": "s3://o/a/output/model.tar.gz"}, "s3://o/a/output/model.tar.gz",
                       lineage_uri="s3://o/a/output/lineage.json", lineage_sha256="ab" * 32),
     {"status": "succeeded", "model_uri": "s3://o/a/output/model.tar.gz",
      "artifacts": {"model.tar.gz": "s3://o/a/output/model.tar.gz"}, "lineage_uri": "s3://o/a/output/lineage.json",
      "lineage_sha256": "ab" * 32}),
    (UploadedArtifacts("failed", {"failure": "s3://o/a/output/failure"}, None, "boom"),
     {"status": "failed", "model_uri": None, "artifacts": {"failure": "s3://o/a/output/failure"}, "failure": "boom",
      "lineage_uri": None, "lineage_sha256": None}),
    (LaunchSummary(True, 0, {"loss": 0.1}, None), {"succeeded": True, "exit_code": 0, "metrics": {"loss": 0.1},
                                                   "failure_class": None, "image_digest": None}),
    (LaunchSummary(False, 1, {}, "UserError", {"algo-2": 1}),
     {"succeeded": False, "exit_code": 1, "metrics": {}, "failure_class": "UserError", "restarts": {"algo-2": 1},
      "image_digest": None}),
    # The image the backend ran: the run's lineage records it (a failed launch's too, from its "outcome" XCom).
    (LaunchSummary(True, 0, {}, None, image_digest="sha256:" + "e" * 64),
     {"succeeded": True, "exit_code": 0, "metrics": {}, "failure_class": None, "image_digest": "sha256:" + "e" * 64}),
]


def test_a_summary_of_an_older_xcom_names_no_image():
    """An "outcome" recorded before image digests were kept reads back with none (never a guess)."""
    old = {"succeeded": False, "exit_code": 1, "metrics": {}, "failure_class": "user_error"}
    assert LaunchSummary.from_dict(old).image_digest is None


@pytest.mark.parametrize("result, xcom", CASES)
def test_each_result_is_today_s_xcom_and_round_trips_through_json(result, xcom):
    assert result.to_dict() == xcom
    assert type(result).from_dict(json.loads(json.dumps(result.to_dict()))) == result


@pytest.mark.parametrize("result, xcom", CASES)
def test_a_well_formed_xcom_reads_as_from_dict_reads_it(result, xcom):
    assert read_result(type(result), json.loads(json.dumps(xcom))) == result


def test_an_older_release_s_xcom_reads_with_the_fields_it_has():
    """The console reads what any release recorded: a launch summary without "succeeded" (written before it was kept)
    or an upload result without lineage still gives its metrics, failure class, model and failure."""
    launch = read_result(LaunchSummary, {"metrics": {"loss": 0.5}, "failure_class": "user_error"})
    assert launch == LaunchSummary(False, None, {"loss": 0.5}, "user_error")
    upload = read_result(UploadedArtifacts, {"status": "failed", "failure": "Traceback ...\nValueError: x\n",
                                             "artifacts": {"failure": "s3://o/a/output/failure"}})
    assert upload.failure == "Traceback ...\nValueError: x\n" and upload.lineage_uri is None
    assert not upload.succeeded and upload.artifacts == {"failure": "s3://o/a/output/failure"}


def test_a_malformed_xcom_never_raises():
    """A field of another type takes its default, the others stay; what is not a mapping is no result at all."""
    launch = read_result(LaunchSummary, {"succeeded": "yes", "exit_code": "1", "metrics": [1, 2],
                                         "failure_class": "platform_error", "restarts": "algo-1"})
    assert launch == LaunchSummary(False, None, {}, "platform_error", {})
    upload = read_result(UploadedArtifacts, {"status": 3, "artifacts": ["model.tar.gz"],
                                             "model_uri": "s3://o/a/output/model.tar.gz"})
    assert upload == UploadedArtifacts("", {}, "s3://o/a/output/model.tar.gz")
    assert read_result(WrittenConfigs, {"hosts": "algo-1"}) == WrittenConfigs((), "")
    assert read_result(StagedChannels, {"train": {"entry": "/e", "is_file": True, "uri": "s3://b/t"}, "bad": 3}) == \
        StagedChannels({"train": StagedChannel("/e", True, "s3://b/t")})
    for value in (None, "model.tar.gz", ["succeeded"], 3):
        assert read_result(LaunchSummary, value) is None

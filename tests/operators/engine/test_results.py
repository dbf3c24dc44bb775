"""The typed results: to_dict() is the XCom the stage always returned (the keys the pipelines, the console and the SDK
read), and each round-trips through JSON."""

from __future__ import annotations

import json

import pytest

from operators.engine.results import (
    LaunchSummary, Restored, StagedChannel, StagedChannels, StagedCode, UploadedArtifacts, WrittenConfigs,
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

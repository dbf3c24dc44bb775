"""The SDK installs without the platform, so it names what it reads of the platform's runs itself: the stages' task
ids, the upload result's failure, the search DAG's tasks. Each is held here to the platform's own."""

from __future__ import annotations

import runpy
from pathlib import Path

from operators.engine.results import UploadedArtifacts, read_result
from operators.stage_names import LAUNCH_TRAINING, PUBLISH_MODEL, UPLOAD_ARTIFACTS
from training_sdk import job, tuner

DAGS = Path(__file__).resolve().parents[2] / "dags"


def test_the_sdk_names_the_stages_as_the_platform_does():
    assert (job.LAUNCH_TASK, job.UPLOAD_TASK, job.PUBLISH_TASK) == (LAUNCH_TRAINING, UPLOAD_ARTIFACTS, PUBLISH_MODEL)


def test_the_sdk_reads_the_failure_the_upload_result_records():
    written = UploadedArtifacts("failed", {}, failure="ValueError: bad row 7\n").to_dict()
    assert written[job.UPLOAD_FAILURE] == "ValueError: bad row 7\n"
    assert read_result(UploadedArtifacts, written).failure == written[job.UPLOAD_FAILURE]


def test_the_tuner_reads_tasks_the_search_dag_has():
    dag = runpy.run_path(str(DAGS / "hyperparameter_search.py"))["dag"]
    assert {tuner.SUMMARY_TASK, tuner.BEST_MODEL_TASK, f"trial.{job.LAUNCH_TASK}"} <= set(dag.task_ids)

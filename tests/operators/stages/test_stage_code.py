"""The stage_code stage: the job's code lands in its job root, and a second DAG run naming the same job is refused."""

from __future__ import annotations

import os

import pytest
from airflow.sdk.exceptions import AirflowFailException

from operators.stages.stage_code import StageCodeOperator


def test_the_code_is_staged_into_the_job_root_and_another_run_of_the_same_job_is_refused(tmp_path, local_job):
    job = local_job()
    (tmp_path / "code" / "lib").mkdir()
    (tmp_path / "code" / "lib" / "util.py").write_text("X = 1\n")

    result = StageCodeOperator(task_id="stage_code", job=job).execute({"run_id": "run-1"})

    assert result["files"] == 2
    assert sorted(os.listdir(result["code_dir"])) == ["lib", "train.py"]
    with open(os.path.join(result["code_dir"], "lib", "util.py")) as handle:
        assert handle.read() == "X = 1\n"
    assert StageCodeOperator(task_id="stage_code", job=job).execute({"run_id": "run-1"})["files"] == 2  # a retry
    with pytest.raises(AirflowFailException, match=job["job_name"]):
        StageCodeOperator(task_id="stage_code", job=job).execute({"run_id": "run-2"})


def test_a_missing_source_fails_the_stage_with_its_path(tmp_path, local_job):
    job = local_job()
    job["source_dir"] = str(tmp_path / "gone")
    with pytest.raises(Exception, match="gone"):
        StageCodeOperator(task_id="stage_code", job=job).execute({"run_id": "run-1"})

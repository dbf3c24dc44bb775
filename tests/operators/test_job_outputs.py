"""The job's output layout, spelled once (operators/job_outputs.py) and read by the spec, the console, restore's
resume_from "latest", a retraining's pointer and a search's summary."""

from __future__ import annotations

import pytest

from operators import job_outputs
from operators.jobspec.model import JobSpec


def test_the_spec_s_output_is_the_layout_s():
    spec = JobSpec.model_validate({"job_name": "churn-1", "source_dir": "s3://b/code/", "entry_point": "train.py",
                                   "output_path": "s3://b/models/"})
    assert spec.job_output_uri == job_outputs.job_output_uri("s3://b/models", "churn-1") == \
        "s3://b/models/churn-1/output/"
    assert job_outputs.model_uri("s3://b/models/", "churn-1") == "s3://b/models/churn-1/output/model.tar.gz"


def test_a_model_uri_names_its_job_and_nothing_else_does():
    assert job_outputs.job_of_model_uri("s3://b/models/churn-1/output/model.tar.gz") == "churn-1"
    assert job_outputs.job_of_model_uri("s3://b/models/churn-1/model.tar.gz") is None
    assert job_outputs.job_of_model_uri("latest") is None and job_outputs.job_of_model_uri(None) is None


def test_only_a_job_s_artifacts_have_a_uri():
    assert job_outputs.artifact_uri("/o", "j", "failure") == "/o/j/output/failure"
    assert job_outputs.artifact_uri("/o", "j", job_outputs.LINEAGE) == "/o/j/output/lineage.json"
    assert job_outputs.LINEAGE in job_outputs.STALE_AFTER_A_RUN  # a new run of the job never shows the old lineage
    with pytest.raises(ValueError, match="not one of a job's artifacts"):
        job_outputs.artifact_uri("/o", "j", "secrets.txt")


def test_a_lineage_s_pointer_and_a_search_s_summary_sit_beside_its_jobs():
    assert job_outputs.latest_pointer_uri("s3://b/models/", "churn") == "s3://b/models/churn/latest.json"
    assert job_outputs.search_summary_uri("s3://b/models", "s1") == "s3://b/models/s1/search_summary.json"

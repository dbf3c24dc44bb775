"""The console's Reproduce data route: the DAG to trigger and the conf that reproduces a job, from its kept lineage
record; a one-line 409 when it cannot be reproduced (no record, another user's run, nothing to pin)."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from operators.lineage.record import write_record
from tests.operators.lineage.lineage_samples import CODE_DIGEST, sample_job, sample_record
from training_console.jobs import Job
from training_console.reproduce import reproduction

RUN = "manual__2026-02-02T01:02:03"


def _job(conf=None, prefix="", dag_id="training_job") -> Job:
    return Job(dag_id, RUN, -1, prefix, conf={"source_dir": "x"} if conf is None else conf,
               validated=sample_job(), tis={"stage_code": ("success", None, None, 1)})


def test_a_finished_run_of_the_user_is_reproduced_on_its_own_dag_with_the_records_pins(tmp_path):
    write_record(str(tmp_path), sample_record())
    answer = reproduction(_job(), str(tmp_path), "alice")
    assert answer["dag_id"] == "training_job"
    assert answer["conf"]["reproduces"]["code_digest"] == CODE_DIGEST and "job_name" not in answer["conf"]
    # a config file's job (no conf) and a search's trial are reproduced by training_job, as Clone does
    write_record(str(tmp_path / "2"), sample_record(dag_id="churn_daily"))
    assert reproduction(_job(conf={}, dag_id="churn_daily"), str(tmp_path / "2"), "alice")["dag_id"] == "training_job"


@pytest.mark.parametrize("user, words", [
    ("bob", "reproduces.job_name: job 'churn-20260202-010203-beef' is not a run of user 'bob'"),
    (None, "is not a run of DAG 'training_job'"),
])
def test_another_owners_run_is_a_409_in_validate_specs_words(tmp_path, user, words):
    write_record(str(tmp_path), sample_record())
    with pytest.raises(HTTPException) as refused:
        reproduction(_job(), str(tmp_path), user)
    assert refused.value.status_code == 409 and words in refused.value.detail


def test_a_run_without_a_record_or_without_a_code_digest_is_a_one_line_409(tmp_path):
    with pytest.raises(HTTPException) as refused:
        reproduction(_job(), str(tmp_path), "alice")
    assert refused.value.status_code == 409 and "has no lineage record" in refused.value.detail
    write_record(str(tmp_path), sample_record(code_digest=None))
    with pytest.raises(HTTPException) as refused:
        reproduction(_job(), str(tmp_path), "alice")
    assert refused.value.status_code == 409 and "records no code digest" in refused.value.detail
    assert "\n" not in refused.value.detail


def test_a_record_of_another_run_under_the_same_job_name_is_not_this_jobs(tmp_path):
    write_record(str(tmp_path), sample_record(run_id="another-run"))
    with pytest.raises(HTTPException, match="has no lineage record"):
        reproduction(_job(), str(tmp_path), "alice")

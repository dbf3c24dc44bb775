"""The view acts only on the validated spec, and serves a local path only inside what this Airflow lets jobs use."""

import os

import pytest
from fastapi import HTTPException

from training_console.jobs import Job
from training_console.spec_access import check_served_paths, require_validated


def test_a_refused_spec_names_nothing_the_view_serves():
    conf = {"job_name": "other-dags-job", "output_path": "/srv/other-dag/models", "connections": {"s3": "prod"}}
    job = Job("training_job", "r1", -1, "", conf=conf)
    assert job.spec == {}  # not the raw conf
    assert job.summary(None)["job_name"] == "other-dags-job"  # the name is still shown
    with pytest.raises(HTTPException) as err:
        require_validated(job.spec)
    assert err.value.status_code == 409 and "not validated" in err.value.detail
    job.record_result("validate_spec", {"job_name": "j", "output_path": "s3://b/m"})
    assert require_validated(job.spec) == {"job_name": "j", "output_path": "s3://b/m"}


def test_local_paths_outside_the_roots_or_in_airflows_files_are_refused(tmp_path, monkeypatch):
    root = tmp_path / "models"
    monkeypatch.setenv("AIRFLOW__TRAINING__LOCAL_ROOTS", str(root))
    check_served_paths({"job_name": "j", "output_path": str(root), "checkpoint_path": "s3://b/ck"})
    for field, uri in (("output_path", "/etc"), ("checkpoint_path", f"file://{tmp_path / 'elsewhere'}"),
                       ("output_path", str(root / ".." / "x"))):
        with pytest.raises(HTTPException) as err:
            check_served_paths({"job_name": "j", field: uri})
        assert err.value.status_code == 403 and err.value.detail.startswith(f"{field} ")
        assert "outside [training] local_roots" in err.value.detail
    monkeypatch.setenv("AIRFLOW__TRAINING__LOCAL_ROOTS", "/")  # roots that allow anything still keep these out
    home = os.environ["AIRFLOW_HOME"]
    for uri in (os.path.join(home, "workspace", "jobs"), os.path.join(home, "logs"), home):
        with pytest.raises(HTTPException, match="Airflow's own files or the training workspace"):
            check_served_paths({"job_name": "j", "output_path": uri})


def test_a_job_root_another_run_holds_is_not_this_runs_files(tmp_path, monkeypatch):
    """Alice's run named bob's job: the lease refused it, but its validated spec names bob's job root and output. The
    view answers as if her job had no files, and says why; bob's own run still reads them."""
    from operators.settings import training_settings
    from operators.state.job_state import ensure_state_dir
    from operators.state.lease import claim
    from training_console.spec_access import (ANOTHER_RUN, NOT_YET, OTHER_RUN, THIS_RUN, files_owner,
                                              require_own_files)

    monkeypatch.setenv("AIRFLOW__TRAINING__WORKSPACE", str(tmp_path / "ws"))
    spec = {"job_name": "bobs-job", "output_path": "s3://b/m"}
    bob = Job("training_job", "bob-run", -1, "", validated=spec)
    alice = Job("training_job", "alice-run", -1, "", validated=spec,
                tis={"stage_code": ("failed", None, None, 1)})
    assert files_owner(bob) == files_owner(alice) == NOT_YET  # nobody claimed it: nothing written there yet
    with pytest.raises(HTTPException, match="no files yet"):
        require_own_files(alice)
    claim(ensure_state_dir(training_settings().workspace, "bobs-job"), "bobs-job", "training_job", "bob-run")
    assert files_owner(bob) == THIS_RUN and files_owner(alice) == ANOTHER_RUN
    require_own_files(bob)
    with pytest.raises(HTTPException) as err:
        require_own_files(alice)
    assert err.value.status_code == 404 and err.value.detail == OTHER_RUN
    other_dag = Job("retraining", "bob-run", -1, "", validated=spec)
    assert files_owner(other_dag) == ANOTHER_RUN  # the claim names the DAG too


def test_a_run_past_the_lease_keeps_its_files_once_retention_removed_the_claim(tmp_path, monkeypatch):
    from training_console.spec_access import NOT_YET, THIS_RUN, files_owner

    monkeypatch.setenv("AIRFLOW__TRAINING__WORKSPACE", str(tmp_path / "ws"))
    spec = {"job_name": "old-job", "output_path": "s3://b/m"}
    done = Job("training_job", "r1", -1, "", validated=spec,
               tis={"stage_code": ("success", None, None, 1), "publish_model": ("success", None, None, 1)})
    refused = Job("training_job", "r2", -1, "", validated=spec,
                  tis={"validate_spec": ("success", None, None, 1), "stage_code": ("failed", None, None, 1)})
    assert files_owner(done) == THIS_RUN and files_owner(refused) == NOT_YET

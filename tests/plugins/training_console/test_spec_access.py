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
    job.xcoms["validate_spec"] = {"job_name": "j", "output_path": "s3://b/m"}
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

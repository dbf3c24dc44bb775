"""Reproduce, the console's data route: what a new run that reproduces a job must be triggered with.

    GET /training-jobs/api/jobs/{dag_id}/{run_id}/{map_index}/reproduction
        -> {"dag_id": the DAG to trigger, "conf": the reproduction's conf}, or 409 {"detail": one line}

The conf is the job's validated spec with `reproduces` set from its KEPT lineage record (operators/lineage/
reproduce.py reproduction_conf; the job's state directory, which tenant code cannot write). The page (static/
console-clone-stop.js) and the SDK (`training-job reproduce`) then trigger it through Airflow's REST API with the user's
own token, as Clone does: Airflow checks that the user may trigger that DAG, and the new run's validate_spec checks the
reproduction again (the record is the new run's owner's, the pins are the record's). A job of a DAG the user may not
read is refused as every job route refuses it; a run that is not the user's is a 409 naming why, in the same words
validate_spec would use.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import APIRouter, Depends, HTTPException

from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import load_ownership, run_owner
from operators.lineage.record import LineageError, read_record
from operators.lineage.reproduce import ReproduceError, check_owner, reproduction_conf
from operators.settings import training_settings
from training_console.jobs import Job, load_jobs
from training_console.spec_access import ANOTHER_RUN, NOT_VALIDATED, OTHER_RUN, files_owner

DEFAULT_DAG = "training_job"  # what a job whose spec came from no conf (a config file, a search's trial) is run by
router = APIRouter()


def target_dag(job: Job) -> str:
    """The DAG a reproduction triggers, as Clone picks it: the job's own DAG when its spec came from the run's conf,
    else training_job (a search's trial, a config file's or a retraining DAG's job: their DAG ignores a conf)."""
    return DEFAULT_DAG if job.prefix or not job.conf else job.dag_id


def reproduction(job: Job, workspace: str, user: str | None, policy=None) -> dict[str, Any]:
    """{"dag_id", "conf"} of a reproduction of `job` by `user`; HTTPException 404/409 (one line) when there is none."""
    spec = job.spec
    if not spec:
        raise HTTPException(409, NOT_VALIDATED)
    if files_owner(job) == ANOTHER_RUN:  # the kept record under this name is another run's
        raise HTTPException(404, OTHER_RUN)
    name = spec["job_name"]
    try:
        record = read_record(workspace, name)
    except (LineageError, OSError, ValueError) as err:
        raise HTTPException(409, f"job {name}'s lineage record cannot be read ({err}); it cannot be reproduced") \
            from None
    if record is None or (record.airflow.dag_id, record.airflow.run_id) != (job.dag_id, job.run_id):
        raise HTTPException(409, f"job {name} has no lineage record (it records one when its upload stage ends, and "
                                 "retention removes it with the job); only a run with one can be reproduced")
    try:
        check_owner(record, run_owner(user, job.dag_id), policy)
        conf = reproduction_conf(record, spec)
    except (SpecError, ReproduceError) as err:
        raise HTTPException(409, str(err)) from None
    return {"dag_id": target_dag(job), "conf": conf}


@router.get("/api/jobs/{dag_id}/{run_id}/{map_index}/reproduction",
            dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))])
def get_reproduction(dag_id: str, run_id: str, map_index: int, session: SessionDep,
                     user: GetUserDep) -> dict[str, Any]:
    job = next((j for j in load_jobs(session, dag_ids=[dag_id], run_id=run_id) if j.map_index == map_index), None)
    if job is None:
        raise HTTPException(404, f"no training job in DAG {dag_id!r} run {run_id!r} (map index {map_index})")
    try:
        policy = load_ownership()
    except ValueError as err:  # the admin's setting is malformed
        raise HTTPException(409, str(err)) from None
    return reproduction(job, training_settings().workspace, user.get_name(), policy)

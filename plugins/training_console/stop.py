"""Stopping a job from the view: who stopped it and when is recorded first, then its stages under way are marked
failed (Airflow then kills a running task, whose on_kill stops the training's processes or pods).

The record is a note: on the DAG run for a job that is the whole run (the SDK and the CLI read the run), and on the
job's launch_training task instance (a search trial is one map index of a run: its note is its own). The note is
written here, on the server, from the logged-in user: a browser cannot sign a stop with someone else's name.
The upload stages are left to run: they keep what the training wrote before it was stopped.
"""

from __future__ import annotations

from datetime import datetime

from airflow.api_fastapi.common.dagbag import create_dag_bag
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance as TI
from airflow.utils.state import TaskInstanceState
from sqlalchemy import select

from operators.stage_names import LAUNCH_TRAINING, STAGES

STOP_NOTE_PREFIX = "Stopped by "  # the SDK's training_sdk.job.STOP_NOTE_PREFIX says the same
STOPPABLE = STAGES[:STAGES.index(LAUNCH_TRAINING) + 1]  # the upload stages run on: they keep what it wrote
UNDER_WAY = {"running", "queued", "scheduled", "deferred", "up_for_retry", "up_for_reschedule", "restarting", None}


def stop_note(user_name: str, when: datetime) -> str:
    return f"{STOP_NOTE_PREFIX}{user_name} at {when:%Y-%m-%d %H:%M:%S} UTC"


def is_stop_note(note: object) -> bool:
    return isinstance(note, str) and note.startswith(STOP_NOTE_PREFIX)


def stop_job(session, job, user_name: str, user_id: str, when: datetime) -> list[str]:
    """Record the stop and mark the job's unfinished stages failed; the task ids marked."""
    note = stop_note(user_name, when)
    run = session.scalar(select(DagRun).where(DagRun.dag_id == job.dag_id, DagRun.run_id == job.run_id))
    if not job.prefix:
        _set_note(run, "dag_run_note", note, user_id)
    launch = session.scalar(select(TI).where(TI.dag_id == job.dag_id, TI.run_id == job.run_id,
                                             TI.task_id == job.prefix + LAUNCH_TRAINING,
                                             TI.map_index == job.map_index))
    if launch is not None:
        _set_note(launch, "task_instance_note", note, user_id)
    session.flush()
    dag = create_dag_bag().get_dag_for_run(run, session=session)
    marked = []
    for stage in STOPPABLE:
        if job.state(stage) not in UNDER_WAY or stage not in job.tis:
            continue
        task_id = job.prefix + stage
        if dag.set_task_instance_state(task_id=task_id, run_id=job.run_id, map_indexes=[job.map_index],
                                       state=TaskInstanceState.FAILED, commit=True, session=session):
            marked.append(task_id)
    session.commit()
    return marked


def _set_note(row, relation: str, content: str, user_id: str) -> None:
    """A new note, or the existing one rewritten (the association proxy would put a tuple in its content)."""
    existing = getattr(row, relation)
    if existing is None:
        row.note = {"content": content, "user_id": user_id}
    else:
        existing.content, existing.user_id = content, user_id

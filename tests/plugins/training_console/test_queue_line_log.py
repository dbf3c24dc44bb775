"""The queue line read through Airflow's own log reader, from a real metadata DB and the log files where Airflow
writes them (the triggerer's own file next to the task's), as the training-jobs API does for a deferred job."""

from __future__ import annotations

import datetime
import json
import textwrap
from pathlib import Path

import pytest

QUEUED = "[kubernetes] queued in team-a (position 2, waiting for cpu: 2 more than is free in flavor default)"
STILL = ("[kubernetes] still queued in team-a (position 1, waiting for cpu: 2 more than is free in flavor default); "
         "60 s in the queue")


def _record(event: str) -> str:
    return json.dumps({"timestamp": "2026-11-26T03:00:00Z", "level": "info", "event": event,
                       "logger": "operators.launch.kubernetes.trigger.KubernetesTrainingJobTrigger"}) + "\n"


@pytest.fixture
def deferred_launch(airflow_db, tmp_path, monkeypatch):
    """A DAG run whose launch_training is deferred after recording its Kueue queue, and its logs so far."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.xcom import XComModel
    from airflow.utils.log.log_reader import TaskLogReader
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "queued_job.py").write_text(textwrap.dedent("""
        from airflow.providers.standard.operators.empty import EmptyOperator
        from airflow.sdk import DAG

        with DAG("queued_job", schedule=None):
            EmptyOperator(task_id="validate_spec") >> EmptyOperator(task_id="launch_training")
    """))
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(DagBag(dag_folder=str(dags)), "dags-folder", None)
    run_id = f"queued-{tmp_path.name}"
    with create_session() as session:
        dag = SerializedDagModel.get_dag("queued_job", session=session)
        run = dag.create_dagrun(run_id=run_id, run_after=datetime.datetime.now(datetime.timezone.utc),
                                run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.TEST,
                                state=DagRunState.RUNNING, session=session)
        tis = {ti.task_id: ti for ti in run.get_task_instances(session=session)}
        tis["validate_spec"].state = TaskInstanceState.SUCCESS
        tis["validate_spec"].try_number = 1
        launch = tis["launch_training"]
        launch.state, launch.try_number = TaskInstanceState.DEFERRED, 1
        session.flush()
        XComModel.set(key="return_value", value={"job_name": "queued", "backend": "kubernetes"}, dag_id="queued_job",
                      task_id="validate_spec", run_id=run_id, map_index=-1, session=session)
        XComModel.set(key="queue", value={"queue": "team-a", "priority": "low"}, dag_id="queued_job",
                      task_id="launch_training", run_id=run_id, map_index=-1, session=session)
        handler = TaskLogReader().log_handler
        path = Path(handler.local_base, handler._render_filename(launch, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_record("Created Job training/queued (2 hosts)") + _record("Pausing task as DEFERRED."))
    trigger_log = Path(handler.add_triggerer_suffix(str(path), job_id=7))  # the triggerer's file of this try
    trigger_log.write_text(_record(QUEUED) + _record("a training line") + _record(STILL))
    return run_id


def test_a_deferred_queued_jobs_page_shows_its_place_from_the_triggers_log(deferred_launch):
    from airflow.utils.session import create_session

    from training_console.app import _job

    with create_session() as session:
        job = _job(session, "queued_job", deferred_launch, -1)
        summary = job.summary(datetime.datetime.now(datetime.timezone.utc))
    assert (summary["status"], summary["queue"]) == ("queued", "team-a")
    assert summary["queue_line"] == STILL.removeprefix("[kubernetes] ")

"""The promotion decision of a retraining run (operators/pipelines/approval.py's XCom "decision") in the console's
job API, read from a real metadata DB with the job's other XComs."""

from __future__ import annotations

import datetime
import textwrap

import pytest

from training_console.jobs import Job

DAG_ID = "retrain_console_approval"
REJECTED = {"asked": True, "approved": False, "decision": "rejected", "by": "olivia", "reason": "drift on segment B",
            "responded_at": "2026-11-21T03:05:12+00:00", "timed_out": False}
TIMED_OUT = {"asked": True, "approved": False, "decision": "rejected", "by": None,
             "reason": "no answer within 4h: the DAG's default (reject)", "responded_at": "2026-11-21T07:05:12+00:00",
             "timed_out": True, "timeout": "4h"}
NOT_ASKED = {"asked": False, "approved": None, "decision": "not required"}


@pytest.fixture
def retraining_runs(airflow_db, tmp_path):
    """Runs of a retraining-shaped DAG: one rejected by a person, one timed out, one not asked, one still training."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "retrain.py").write_text(textwrap.dedent(f"""
        from airflow.providers.standard.operators.empty import EmptyOperator
        from airflow.sdk import DAG

        with DAG("{DAG_ID}", schedule=None):
            (EmptyOperator(task_id="validate_spec") >> EmptyOperator(task_id="launch_training")
             >> EmptyOperator(task_id="approve_promotion"))
    """))
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(DagBag(dag_folder=str(dags)), "dags-folder", None)
    runs = {name: f"{name}-{tmp_path.name}" for name in ("rejected", "timed-out", "not-asked", "training")}
    records = {"rejected": REJECTED, "timed-out": TIMED_OUT, "not-asked": NOT_ASKED}
    with create_session() as session:
        dag = SerializedDagModel.get_dag(DAG_ID, session=session)
        for name, run_id in runs.items():
            dag.create_dagrun(run_id=run_id, run_after=datetime.datetime.now(datetime.timezone.utc),
                              run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.TEST,
                              state=DagRunState.RUNNING, session=session)
            session.flush()
            XComModel.set(key="return_value", value={"job_name": name, "backend": "local"}, dag_id=DAG_ID,
                          task_id="validate_spec", run_id=run_id, map_index=-1, session=session)
            if name in records:
                XComModel.set(key="decision", value=records[name], dag_id=DAG_ID, task_id="approve_promotion",
                              run_id=run_id, map_index=-1, session=session)
                # its return value is the same record (or none after a rejection): not what the page reads
                XComModel.set(key="return_value", value={"decision": "something else"}, dag_id=DAG_ID,
                              task_id="approve_promotion", run_id=run_id, map_index=-1, session=session)
    return runs


def test_the_job_api_says_who_decided_the_promotion_and_why(retraining_runs):
    from airflow.utils.session import create_session

    from training_console.jobs import load_jobs

    with create_session() as session:
        jobs = {j.run_id: j for j in load_jobs(session, dag_ids=[DAG_ID])}  # one query for them all, as the list
    now = datetime.datetime.now(datetime.timezone.utc)
    rows = {name: jobs[run_id].summary(now) for name, run_id in retraining_runs.items()}
    assert {name: row["job_name"] for name, row in rows.items()} == {n: n for n in rows}  # the stages' XComs too
    assert rows["rejected"]["approval"] == {"asked": True, "decision": "rejected", "by": "olivia",
                                            "reason": "drift on segment B", "at": "2026-11-21T03:05:12+00:00",
                                            "timed_out": False, "timeout": None}
    timed_out = rows["timed-out"]["approval"]
    assert (timed_out["timed_out"], timed_out["timeout"], timed_out["decision"], timed_out["by"]) == (
        True, "4h", "rejected", None)
    assert rows["not-asked"]["approval"] == {"asked": False, "decision": "not required", "by": None, "reason": "",
                                             "at": None, "timed_out": False, "timeout": None}
    assert "approval" not in rows["training"]  # no decision recorded (yet): no field


def test_a_job_of_a_dag_without_approval_has_no_approval_field():
    plain = Job("training_job", "r", -1, "")
    plain.record_result("validate_spec", {"job_name": "r"})
    assert "approval" not in plain.summary(datetime.datetime.now(datetime.timezone.utc))
    plain.approval = "not a record"
    assert plain.approval_decision() is None

"""The job page reads each stage's XCom once, into its typed result (operators/engine/results.py), from a real
metadata DB: an XCom an older release wrote (fields missing) and a malformed one (fields of another type) give the
page what they have, never a 500; the readers get typed values."""

from __future__ import annotations

import datetime
import textwrap

import pytest

from operators.engine.results import LaunchSummary, UploadedArtifacts
from operators.stage_names import LAUNCH_TRAINING, PUBLISH_MODEL, UPLOAD_ARTIFACTS, VALIDATE_SPEC

DAG_ID = "results_job"
SPEC = {"job_name": "old-release", "base_job_name": "old", "backend": "local", "layout": "ti", "instance_count": 1,
        "output_path": "s3://models/demo"}
# An older release's failed launch: its "outcome" without "succeeded", "exit_code" or "image_digest".
OLD_OUTCOME = {"metrics": {"loss": 0.7}, "failure_class": "user_error"}
OUT = "s3://models/demo/old-release/output/"


def _run(tmp_path, xcoms: dict[tuple[str, str], object], states: dict[str, str]) -> str:
    """A DAG run of the stages whose task states are `states` and whose XComs are `xcoms` ((task, key) -> value)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "results_job.py").write_text(textwrap.dedent(f"""
        from airflow.providers.standard.operators.empty import EmptyOperator
        from airflow.sdk import DAG, chain

        with DAG({DAG_ID!r}, schedule=None):
            chain(*(EmptyOperator(task_id=t) for t in {[VALIDATE_SPEC, LAUNCH_TRAINING, UPLOAD_ARTIFACTS,
                                                         PUBLISH_MODEL]!r}))
    """))
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(DagBag(dag_folder=str(dags)), "dags-folder", None)
    run_id = f"results-{tmp_path.name}"
    with create_session() as session:
        dag = SerializedDagModel.get_dag(DAG_ID, session=session)
        run = dag.create_dagrun(run_id=run_id, run_after=datetime.datetime.now(datetime.timezone.utc),
                                run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.TEST,
                                state=DagRunState.FAILED, session=session)
        for ti in run.get_task_instances(session=session):
            ti.state, ti.try_number = states.get(ti.task_id), 1
        session.flush()
        for (task_id, key), value in xcoms.items():
            XComModel.set(key=key, value=value, dag_id=DAG_ID, task_id=task_id, run_id=run_id, map_index=-1,
                          session=session)
    return run_id


def _page(run_id: str, monkeypatch) -> tuple:
    """The job API's response (GET /training-jobs/api/jobs/...) and the job it read, as a reader of this DAG."""
    from airflow.utils.session import create_session

    from training_console import app

    monkeypatch.setattr(app, "_readable_dags", lambda user, session: {DAG_ID})
    with create_session() as session:
        return app.get_job(DAG_ID, run_id, -1, session, user=None), app._job(session, DAG_ID, run_id, -1)


FAILED = {VALIDATE_SPEC: "success", LAUNCH_TRAINING: "failed", UPLOAD_ARTIFACTS: "success",
          PUBLISH_MODEL: "upstream_failed"}


def test_an_older_release_s_results_show_as_before_and_read_typed(airflow_db, tmp_path, monkeypatch):
    upload = {"status": "failed", "model_uri": None, "artifacts": {"failure": OUT + "failure"},
              "failure": "Traceback ...\nValueError: bad row 7\n"}  # no lineage_uri: written before lineage
    run_id = _run(tmp_path, {(VALIDATE_SPEC, "return_value"): SPEC, (LAUNCH_TRAINING, "outcome"): OLD_OUTCOME,
                             (UPLOAD_ARTIFACTS, "return_value"): upload}, FAILED)
    page, job = _page(run_id, monkeypatch)
    assert job.launch == LaunchSummary(False, None, {"loss": 0.7}, "user_error")
    assert job.upload == UploadedArtifacts("failed", {"failure": OUT + "failure"}, None, upload["failure"])
    assert (page["status"], page["failed_stage"], page["failure_class"]) == ("failed", LAUNCH_TRAINING, "user_error")
    assert page["metrics"] == {"loss": 0.7} and page["restarts"] == {} and page["model_uri"] is None
    assert page["failure"] == "Traceback ...\nValueError: bad row 7"
    assert page["artifacts"] == [{"name": "failure", "uri": OUT + "failure", "available": True}]
    assert page["validated"] is True and page["spec"] == SPEC


def test_malformed_results_leave_the_page_showing_what_it_can(airflow_db, tmp_path, monkeypatch):
    """Fields of another type (a list of artifacts, metrics as text) were a 500 or a broken list sort: now each such
    field reads as absent and the page shows the rest."""
    upload = {"status": "failed", "artifacts": ["failure"], "failure": "out of memory\n"}
    launch = {"succeeded": False, "metrics": "n/a", "failure_class": "platform_error", "restarts": ["algo-1"]}
    run_id = _run(tmp_path, {(VALIDATE_SPEC, "return_value"): SPEC, (LAUNCH_TRAINING, "outcome"): launch,
                             (UPLOAD_ARTIFACTS, "return_value"): upload}, FAILED)
    page, job = _page(run_id, monkeypatch)
    assert job.launch == LaunchSummary(False, None, {}, "platform_error")
    assert (page["failure_class"], page["metrics"], page["restarts"]) == ("platform_error", {}, {})
    assert page["failure"] == "out of memory"
    # nothing reported as uploaded: the page says where the artifacts go, as for a job whose upload never ran
    assert [(a["name"], a["available"]) for a in page["artifacts"]] == [("model.tar.gz", False),
                                                                        ("metrics.json", False)]

    from training_console.jobs import query_items

    listed = query_items([job], sort="metric:loss")  # sorting the list by a metric reads every row's metrics
    assert listed["total"] == 1 and listed["metric_names"] == []


@pytest.mark.parametrize("value", ["model.tar.gz", ["succeeded"], 3])
def test_a_result_that_is_not_a_mapping_is_no_result(airflow_db, tmp_path, monkeypatch, value):
    run_id = _run(tmp_path, {(VALIDATE_SPEC, "return_value"): SPEC, (LAUNCH_TRAINING, "outcome"): value,
                             (UPLOAD_ARTIFACTS, "return_value"): value}, FAILED)
    page, job = _page(run_id, monkeypatch)
    assert (job.launch, job.upload) == (None, None)
    assert (page["status"], page["failure_class"], page["metrics"], page["model_uri"]) == ("failed", None, {}, None)

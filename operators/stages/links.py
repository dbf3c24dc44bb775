"""Extra links of the training stages, shown by the Airflow 3 UI on each task instance.

Airflow 3 computes operator links in the worker when the task ends and stores the URL as an XCom, so a link must not
depend on anything that expires or is secret: every link here points at the training-jobs plugin's own API
(plugins/training_console), which resolves it when clicked: a local artifact is streamed, an object-storage one
redirects to a short-lived presigned https URL or to the provider's console ([training] artifact_links), a log is
read through Airflow's log reader. No file:// URL, no credentials, nothing that goes stale in the XCom.
"""

from __future__ import annotations

from airflow.sdk import BaseOperatorLink

from operators.console_urls import artifact_url, job_page_url, run_view_url
from operators.job_outputs import FAILURE, MODEL
from operators.stage_names import LAUNCH_TRAINING


class _JobLink(BaseOperatorLink):
    """A link about the training job the task belongs to (dag run + map index of a search trial)."""

    def url(self, dag_id: str, run_id: str, map_index: int) -> str:
        raise NotImplementedError

    def get_link(self, operator, *, ti_key) -> str:
        return self.url(ti_key.dag_id, ti_key.run_id, ti_key.map_index)


class ModelArtifactsLink(_JobLink):
    name = "Model"

    def url(self, dag_id, run_id, map_index):
        return artifact_url(dag_id, run_id, map_index, MODEL)


class MetricsLink(_JobLink):
    name = "Metrics"

    def url(self, dag_id, run_id, map_index):
        return job_page_url(dag_id, run_id, map_index, "metrics")


class FailureReasonLink(_JobLink):
    """Only where the job failed: the task itself failed, or the training did (its launch stage recorded the outcome
    of a failed launch; the upload and publish stages run on after it). Elsewhere the link is empty, which Airflow's
    UI does not offer."""

    name = "Failure reason"

    def url(self, dag_id, run_id, map_index):
        return artifact_url(dag_id, run_id, map_index, FAILURE)

    def get_link(self, operator, *, ti_key) -> str:
        if not _job_failed(ti_key):
            return ""
        return super().get_link(operator, ti_key=ti_key)


def _job_failed(ti) -> bool:
    """In the worker, where Airflow computes the links when the task ends, `ti` is the running task instance; given a
    bare key (nothing to ask), the link is kept."""
    if not hasattr(ti, "xcom_pull"):
        return True
    if str(getattr(ti, "state", "") or "") in ("failed", "up_for_retry"):
        return True
    group, _, _ = ti.task_id.rpartition(".")
    launch = f"{group}.{LAUNCH_TRAINING}" if group else LAUNCH_TRAINING
    try:
        outcome = ti.xcom_pull(task_ids=launch, key="outcome", map_indexes=ti.map_index)
    except Exception:  # noqa: BLE001 - a link must never fail the task; when in doubt, offer it
        return True
    return isinstance(outcome, dict) and not outcome.get("succeeded", False)


class HostLogsLink(_JobLink):
    name = "Host logs"

    def url(self, dag_id, run_id, map_index):
        return job_page_url(dag_id, run_id, map_index, "logs")


class TrainingJobLink(_JobLink):
    """Inside Airflow's UI: the run's Training jobs tab (a plain job is its run's only job; a search's tab lists its
    trials). The view's own page is left for the links to a section of one job (metrics, logs)."""

    name = "Training job"

    def url(self, dag_id, run_id, map_index):
        return run_view_url(dag_id, run_id)


def stage_links() -> tuple[BaseOperatorLink, ...]:
    """The links every stage after validation shows (one set, so the UI shows the same menu on each)."""
    return (TrainingJobLink(), ModelArtifactsLink(), MetricsLink(), FailureReasonLink(), HostLogsLink())


ALL_LINKS = (TrainingJobLink, ModelArtifactsLink, MetricsLink, FailureReasonLink, HostLogsLink)

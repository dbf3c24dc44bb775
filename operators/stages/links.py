"""Extra links of the training stages, shown by the Airflow 3 UI on each task instance.

Airflow 3 computes operator links in the worker when the task ends and stores the URL as an XCom, so a link must not
depend on anything that expires or is secret: every link here points at the training-jobs plugin's own API
(plugins/training_console), which resolves it when clicked: a local artifact is streamed, an object-storage one
redirects to a short-lived presigned https URL or to the provider's console ([training] artifact_links), a log is
read through Airflow's log reader. No file:// URL, no credentials, nothing that goes stale in the XCom.
"""

from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

PLUGIN_PREFIX = "/training-jobs"
RUN_VIEW_ROUTE = "training-jobs-run"  # the plugin's tab on a DAG run, inside Airflow's UI (training_jobs_plugin.py)
STAGES = ("validate_spec", "stage_code", "prefetch_data", "write_configs", "restore", "launch_training",
          "upload_artifacts", "publish_model")

CONSOLES = {
    "s3": "https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={key}",
    "cos": "https://console.cloud.tencent.com/cos/bucket?bucket={bucket}&path=/{key}",
    "oss": "https://oss.console.aliyun.com/bucket/oss/{bucket}/object?path={key}",
    "obs": "https://console.huaweicloud.com/console/#/obs/manager/buckets/{bucket}/objects?prefix={key}",
}


def console_url(uri: str) -> str | None:
    """The provider console page of the folder holding an object; None for local paths and unknown schemes."""
    if "://" not in uri:
        return None
    scheme, rest = uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    template = CONSOLES.get(scheme)
    return template.format(bucket=bucket, key=quote(key.rsplit("/", 1)[0] + "/")) if template else None


def base_url() -> str:
    """Where the UI is served ([api] base_url, else http://<[api] host>:<[api] port>), without a trailing slash."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    if base:
        return base
    host = conf.get("api", "host", fallback="127.0.0.1") or "127.0.0.1"
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{conf.get('api', 'port', fallback='8080')}"


def job_path(dag_id: str, run_id: str, map_index: int) -> str:
    """The plugin's path of one training job (a trial of a search is one job: its map index)."""
    return f"{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{int(map_index)}"


def artifact_url(dag_id: str, run_id: str, map_index: int, name: str) -> str:
    return f"{base_url()}{PLUGIN_PREFIX}/api/jobs/{job_path(dag_id, run_id, map_index)}/artifacts/{name}"


def job_page_url(dag_id: str, run_id: str, map_index: int, section: str = "") -> str:
    return f"{base_url()}{PLUGIN_PREFIX}/ui/#/job/{job_path(dag_id, run_id, map_index)}" + (
        f"/{section}" if section else "")


class _JobLink(BaseOperatorLink):
    """A link about the training job the task belongs to (dag run + map index of a search trial)."""

    def url(self, dag_id: str, run_id: str, map_index: int) -> str:
        raise NotImplementedError

    def get_link(self, operator, *, ti_key) -> str:
        return self.url(ti_key.dag_id, ti_key.run_id, ti_key.map_index)


class ModelArtifactsLink(_JobLink):
    name = "Model"

    def url(self, dag_id, run_id, map_index):
        return artifact_url(dag_id, run_id, map_index, "model.tar.gz")


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
        return artifact_url(dag_id, run_id, map_index, "failure")

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
    launch = f"{group}.launch_training" if group else "launch_training"
    try:
        outcome = ti.xcom_pull(task_ids=launch, key="outcome", map_indexes=ti.map_index)
    except Exception:  # noqa: BLE001 - a link must never fail the task; when in doubt, offer it
        return True
    return isinstance(outcome, dict) and not outcome.get("succeeded", False)


class HostLogsLink(_JobLink):
    name = "Host logs"

    def url(self, dag_id, run_id, map_index):
        return job_page_url(dag_id, run_id, map_index, "logs")


def run_view_url(dag_id: str, run_id: str) -> str:
    """The run's "Training jobs" tab in Airflow's own UI (the view in its frame, with Airflow's navigation)."""
    return f"{base_url()}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/plugin/{RUN_VIEW_ROUTE}"


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

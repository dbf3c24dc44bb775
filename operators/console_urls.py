"""The URLs of the training-jobs console (plugins/training_console) and of the object stores' own consoles: one home
for every module that links to a job (the stages' extra links, MLflow's run tags, the approval step, the console).
Nothing here imports Airflow: the UI's base URL is read from [api] when a URL is built, through operators/settings.py's
reader (Airflow's conf on a worker, the environment in a data-plane step: operators/step_process.py).
"""

from __future__ import annotations

from urllib.parse import quote

from operators.settings import get_str

PLUGIN_PREFIX = "/training-jobs"
LINEAGE_SECTION = "lineage"  # the job page's Lineage panel: its element id (static/console-job.js)
RUN_VIEW_ROUTE = "training-jobs-run"  # the plugin's tab on a DAG run, inside Airflow's UI (training_jobs_plugin.py)

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
    base = get_str("api", "base_url", "").rstrip("/")
    if base:
        return base
    host = get_str("api", "host", "127.0.0.1") or "127.0.0.1"
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{get_str('api', 'port', '8080')}"


def job_path(dag_id: str, run_id: str, map_index: int) -> str:
    """The plugin's path of one training job (a trial of a search is one job: its map index)."""
    return f"{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{int(map_index)}"


def artifact_url(dag_id: str, run_id: str, map_index: int, name: str) -> str:
    return f"{base_url()}{PLUGIN_PREFIX}/api/jobs/{job_path(dag_id, run_id, map_index)}/artifacts/{name}"


def job_page_url(dag_id: str, run_id: str, map_index: int, section: str = "") -> str:
    return f"{base_url()}{PLUGIN_PREFIX}/ui/#/job/{job_path(dag_id, run_id, map_index)}" + (
        f"/{section}" if section else "")


def lineage_view_url(dag_id: str, run_id: str, map_index: int) -> str:
    """The job page scrolled to its Lineage panel (code, data versions, image, parent chain): what a registered model
    version and its MLflow run link to."""
    return job_page_url(dag_id, run_id, map_index, LINEAGE_SECTION)


def run_view_url(dag_id: str, run_id: str) -> str:
    """The run's "Training jobs" tab in Airflow's own UI (the view in its frame, with Airflow's navigation)."""
    return f"{base_url()}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/plugin/{RUN_VIEW_ROUTE}"

"""The training-jobs plugin's FastAPI app, mounted by Airflow's API server at /training-jobs.

    /training-jobs/ui/                                        the page (plain HTML + JS: no build, no CDN)
    /training-jobs/ui/vendor/plotly.min.js                    its chart library, from the installed plotly package
    /training-jobs/api/jobs                                   the list (filter, sort, paginate; ?status ?dag_id ?q
                                                              ?tag=team:churn ?from ?to ?metric=accuracy>=0.9)
    /training-jobs/api/jobs/{dag_id}/{run_id}/{map_index}     one job: spec, stages, artifacts, failure
    /training-jobs/api/jobs/.../metrics                       metric series (live while training runs)
    /training-jobs/api/jobs/.../artifacts/{name}              model.tar.gz, metrics.json, failure, output.tar.gz
    /training-jobs/api/jobs/.../files                         every file under the job's output prefix
    /training-jobs/api/jobs/.../files/{path}                  one of them (?preview=true: text/JSON inline, capped)
    /training-jobs/api/jobs/.../reproduction                  the conf that reproduces the job (training_console/reproduce.py)
    /training-jobs/api/jobs/.../lineage                       what made its model, and its parents (training_console/lineage.py)
    /training-jobs/ui/compare.html?job=...&run=...            the compare page (static/compare.js; "Compare jobs" in the list)
    /training-jobs/api/compare?job=...&run=...                its data (training_console/compare.py)

Every data route needs a logged-in Airflow user (the UI's `_token` cookie or a bearer token) with read access to the
DAG (the list: only the DAGs the auth manager lets the user read); so do /openapi.json and /docs. Files, the failure
reason and metrics come only from the validated spec, within the allowed roots, and only when the lease says the job
root is this run's (training_console/spec_access.py). A state-changing route refuses what another site's page could
send, and every response carries the pages' Content-Security-Policy (training_console/web_boundary.py).
The page calls Airflow's own REST API for logs and actions (stop, trigger a clone).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.models.xcom import XComModel
from sqlalchemy import select

from operators.engine.results import UploadedArtifacts
from operators.job_outputs import FAILURE, METRICS, MODEL, OUTPUT_ARCHIVE
from operators.stage_names import LAUNCH_TRAINING, STAGES, STAGE_LABELS
from operators.tracking.metrics import METRIC_SERIES_KEY, is_system_metric
from training_console import artifacts, compare, lineage, output_files, reproduce, vendor
from training_console.docs_behind_login import add_docs_behind_login
from training_console.jobs import Job, decode_xcom, load_jobs, load_jobs_cached, query_items
from training_console.list_filters import FilterError, parse_filters
from training_console.queue_line import read_queue_line
from training_console.spec_access import (ANOTHER_RUN, OTHER_RUN, THIS_RUN, check_served_paths, files_owner,
                                          require_own_files, require_validated)
from training_console.stop import stop_job
from training_console.warmup import warm_up
from training_console.web_boundary import refuse_cross_site, security_headers

STATIC = Path(__file__).parent / "static"
ARTIFACTS = (MODEL, METRICS, FAILURE, OUTPUT_ARCHIVE)  # what .../artifacts/{name} serves, in the order its 404 names
CAN_READ_RUN = Depends(requires_access_dag("GET", DagAccessEntity.RUN))
CAN_CHANGE_TASKS = Depends(requires_access_dag("PUT", DagAccessEntity.TASK_INSTANCE))

app = FastAPI(title="Training jobs", description="The training-jobs view of the training-job platform",
              openapi_url=None, docs_url=None, redoc_url=None, lifespan=warm_up,
              dependencies=[Depends(refuse_cross_site)])  # every route: training_console/web_boundary.py
app.middleware("http")(security_headers)
add_docs_behind_login(app)
app.include_router(reproduce.router)  # .../reproduction: what Reproduce triggers (training_console/reproduce.py)


def _now() -> datetime:
    return datetime.now(timezone.utc)


@app.get("/", include_in_schema=False)
@app.get("/ui", include_in_schema=False)
def index_redirect(request: Request) -> RedirectResponse:
    return RedirectResponse(str(request.url_for("page")))


@app.get("/ui/", include_in_schema=False, name="page")
def page() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


@app.get("/ui/vendor/plotly.min.js", include_in_schema=False)
def plotly_library() -> FileResponse:
    """The chart library of static/charts.js, from the installed `plotly` package (training_console/vendor.py)."""
    try:
        path = vendor.plotly_js()
    except FileNotFoundError as err:
        raise HTTPException(404, str(err)) from None
    return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})


@app.get("/ui/{name}", include_in_schema=False)
def static_file(name: str) -> FileResponse:
    path = STATIC / name
    if name not in {p.name for p in STATIC.iterdir()}:
        raise HTTPException(404, f"no such file: {name}")
    return FileResponse(path, headers={"Cache-Control": "no-cache"})


@app.get("/api/jobs")
def list_jobs(
    user: GetUserDep,
    session: SessionDep,
    status: str | None = None,
    dag_id: str | None = None,
    run_id: str | None = None,
    q: str | None = None,
    tag: Annotated[list[str], Query()] = [],  # noqa: B006 - <name> or <name>:<value>, repeated: all must match
    created_from: Annotated[str | None, Query(alias="from")] = None,
    created_to: Annotated[str | None, Query(alias="to")] = None,
    metric: Annotated[list[str], Query()] = [],  # noqa: B006 - accuracy>=0.9, repeated: all must hold
    sort: str = "created",
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    try:
        filters = parse_filters(tags=tag, created_from=created_from, created_to=created_to, metrics=metric)
    except FilterError as err:
        raise HTTPException(400, str(err)) from None
    allowed = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    jobs = load_jobs_cached(session, dag_ids=allowed if dag_id is None else ({dag_id} & set(allowed)))
    _read_queue_lines(session, jobs)
    result = query_items(jobs, status=status or None, dag_id=dag_id or None, run_id=run_id or None, q=q or None,
                         filters=filters, sort=sort, descending=order == "desc", offset=offset, limit=limit, now=_now())
    _add_live_metrics(result, jobs)
    return result


def _add_live_metrics(result: dict[str, Any], jobs: list[Job]) -> None:
    """The running jobs of the page show their latest metric values, as the job page's curves do (the launch stage
    records final metrics only when it ends)."""
    by_key = {(j.dag_id, j.run_id, j.map_index): j for j in jobs}
    names = set(result["metric_names"])
    for item in result["items"]:
        for row in [item, *item.get("trials", ())] if item.get("kind") == "search" else [item]:
            job = by_key.get((row["dag_id"], row["run_id"], row.get("map_index")))
            if row.get("status") != "running" or row.get("metrics") or job is None or not job.spec:
                continue
            if files_owner(job) != THIS_RUN:
                continue
            try:
                check_served_paths(job.spec)
            except HTTPException:
                continue
            latest = {name: points[-1]["value"] for name, points in
                      (artifacts.metrics(job.spec, live=True).get("series") or {}).items()
                      if points and not is_system_metric(name)}
            row["metrics"] = latest
            names.update(latest)
    result["metric_names"] = sorted(names)


def _read_queue_lines(session, jobs: list[Job]) -> None:
    """Jobs waiting deferred in a Kueue queue: their place in it, from the task log (training_console/queue_line.py);
    only these logs are read, so the list of finished jobs costs nothing more."""
    for job in jobs:
        if job.waits_in_queue():
            job.queue_line = read_queue_line(session, job.dag_id, job.run_id, job.prefix + LAUNCH_TRAINING,
                                             job.map_index, job.tis[LAUNCH_TRAINING][3])


def _job(session, dag_id: str, run_id: str, map_index: int) -> Job:
    for job in load_jobs(session, dag_ids=[dag_id], run_id=run_id):
        if job.map_index == map_index:
            _read_queue_lines(session, [job])
            return job
    raise HTTPException(404, f"no training job in DAG {dag_id!r} run {run_id!r} (map index {map_index})")


def _readable_dags(user, session) -> set[str]:
    return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session))


@app.get("/api/jobs/{dag_id}/{run_id}/{map_index}", dependencies=[CAN_READ_RUN])
def get_job(dag_id: str, run_id: str, map_index: int, session: SessionDep, user: GetUserDep) -> dict[str, Any]:
    job = _job(session, dag_id, run_id, map_index)
    spec = job.spec  # the validated spec, or {}: a refused spec names no file
    if spec:
        check_served_paths(spec)
    owner = files_owner(job)
    summary = job.summary(_now())
    upload = job.upload
    output = artifacts.output_uri(spec)
    listed = artifacts.describe(spec, upload, job.state(LAUNCH_TRAINING))
    stages = [{"stage": s, "label": STAGE_LABELS[s], "task_id": job.prefix + s, "state": job.state(s),
               "start": _iso(job.tis.get(s, (None, None))[1]), "end": _iso(job.tis.get(s, (None, None, None))[2]),
               "try_number": job.tis.get(s, (None, None, None, None))[3]} for s in STAGES]
    return {
        **summary,
        "spec": spec,
        "conf": job.conf,
        "validated": job.validated is not None,
        "stages": stages,
        "task_prefix": job.prefix,
        "output_uri": output,
        "artifacts": listed,
        "failure": _why_it_ended(job, spec if owner == THIS_RUN else {}, upload, summary["status"]),
        "files_note": OTHER_RUN if owner == ANOTHER_RUN else None,
        "hosts": artifacts.hosts(spec),
        "resume_parent": artifacts.parent_of(session, spec.get("resume_from"),
                                             dag_ids=_readable_dags(user, session)),
    }


def _why_it_ended(job: Job, spec: dict, upload: UploadedArtifacts | None, status: str) -> str | None:
    """Who stopped it and when; else the training's own failure file (the user's traceback tail, the launcher's
    reason); else what the failed stage recorded (the refused spec, the refused path, the storage error)."""
    if status == "stopped" and job.stop_note:
        return job.stop_note
    if status not in ("failed", "stopped"):
        return None
    return artifacts.failure_reason(spec, upload, job.state(LAUNCH_TRAINING)) or job.stage_reason()


@app.post("/api/jobs/{dag_id}/{run_id}/{map_index}/stop", dependencies=[CAN_READ_RUN, CAN_CHANGE_TASKS])
def post_stop(dag_id: str, run_id: str, map_index: int, session: SessionDep, user: GetUserDep) -> dict[str, Any]:
    """Stop a job that has not ended: recorded as "Stopped by <user> at <time>", its stages under way marked failed
    (training_console/stop.py)."""
    job = _job(session, dag_id, run_id, map_index)
    status, _ = job.status()
    if status not in ("running", "queued"):
        raise HTTPException(409, f"training job {job.summary(_now())['job_name'] or run_id} already ended ({status}); "
                                 "nothing to stop")
    marked = stop_job(session, job, user.get_name(), user.get_id(), _now())
    return {"stopped": marked, "status": "stopping"}


@app.get("/api/jobs/{dag_id}/{run_id}/{map_index}/metrics", dependencies=[CAN_READ_RUN])
def get_metrics(dag_id: str, run_id: str, map_index: int, session: SessionDep) -> dict[str, Any]:
    job = _job(session, dag_id, run_id, map_index)
    status, _ = job.status()
    queue_line = job.queue_line if job.queued_in() else None  # the page updates the job's place in its queue
    owner = files_owner(job)
    if not job.spec or owner != THIS_RUN:
        return {"status": status, "final": {}, "series": {}, "queue_line": queue_line,
                "note": OTHER_RUN if owner == ANOTHER_RUN else None}
    check_served_paths(job.spec)
    return {"status": status, "queue_line": queue_line,
            **artifacts.metrics(job.spec, live=status in ("running", "queued"),
                                recorded=_metric_series(session, job))}


def _metric_series(session, job: Job) -> Any:
    """The series the launch task recorded as XCom (the cluster's data plane: no metrics.json on this side); read for
    one job's page only, never for the list."""
    value = session.scalar(select(XComModel.value).where(
        XComModel.dag_id == job.dag_id, XComModel.run_id == job.run_id,
        XComModel.task_id == job.prefix + LAUNCH_TRAINING, XComModel.map_index == job.map_index,
        XComModel.key == METRIC_SERIES_KEY))
    return decode_xcom(value) if value is not None else None


@app.get("/api/compare")
def compare_jobs(user: GetUserDep, session: SessionDep, job: Annotated[list[str], Query()] = [],  # noqa: B006
                 run: Annotated[list[str], Query()] = []) -> dict[str, Any]:  # noqa: B006
    """Several jobs side by side (training_console/compare.py): only jobs of DAGs this user may read."""
    if not job and not run:
        raise HTTPException(400, "name the jobs to compare: ?job=<dag_id>/<run_id>/<map_index> (repeated) or "
                                 "?run=<dag_id>/<run_id> (every trial of a search)")
    chosen = compare.select(job, run, _readable_dags(user, session),
                            lambda dag_id, run_id: load_jobs(session, dag_ids=[dag_id], run_id=run_id))

    def metrics_of(one: Job) -> dict[str, Any]:
        owner = files_owner(one)
        if not one.spec or owner != THIS_RUN:
            return {"error": OTHER_RUN} if owner == ANOTHER_RUN else {}
        try:
            check_served_paths(one.spec)
        except HTTPException as err:  # this job's files are not served; the others are still compared
            return {"error": err.detail}
        status, _ = one.status()
        return artifacts.metrics(one.spec, live=status in ("running", "queued"))

    return compare.compare(chosen, _now(), metrics_of, lineage_of=lineage.lineage_or_none)


@app.get("/api/jobs/{dag_id}/{run_id}/{map_index}/artifacts/{name}", dependencies=[CAN_READ_RUN])
def get_artifact(dag_id: str, run_id: str, map_index: int, name: str, session: SessionDep) -> Response:
    if name not in ARTIFACTS:
        raise HTTPException(404, f"unknown artifact {name!r}; one of {', '.join(ARTIFACTS)}")
    job = _job(session, dag_id, run_id, map_index)
    spec = require_validated(job.spec)
    check_served_paths(spec)
    require_own_files(job)
    return artifacts.respond(spec, name)


@app.get("/api/jobs/{dag_id}/{run_id}/{map_index}/files", dependencies=[CAN_READ_RUN])
def get_output_files(dag_id: str, run_id: str, map_index: int, session: SessionDep) -> dict[str, Any]:
    """The job's output prefix, listed (training_console/output_files.py)."""
    job = _job(session, dag_id, run_id, map_index)
    spec = require_validated(job.spec)
    check_served_paths(spec)
    require_own_files(job)
    return output_files.list_files(spec)


@app.get("/api/jobs/{dag_id}/{run_id}/{map_index}/files/{path:path}", dependencies=[CAN_READ_RUN])
def get_output_file(dag_id: str, run_id: str, map_index: int, path: str, session: SessionDep,
                    preview: bool = False) -> Any:
    """One file of the job's output: downloaded, or previewed (text and JSON, the first 64 KiB)."""
    job = _job(session, dag_id, run_id, map_index)
    spec = require_validated(job.spec)
    check_served_paths(spec)
    require_own_files(job)
    return output_files.preview(spec, path) if preview else output_files.download(spec, path)


app.include_router(lineage.router)  # /api/jobs/.../lineage: the app's dependencies and headers apply to it too


def _iso(value) -> str | None:
    return value.isoformat() if value else None

"""The training jobs Airflow already knows about, read from its metadata DB: no table of our own.

A job is the stage chain of one spec in one DAG run: the tasks `[<group>.]validate_spec ... publish_model` with one map
index (a hyperparameter search runs one job per trial, as mapped task group instances). What the pipeline records is
enough: the validated spec (validate_spec's XCom), the launch summary (final metrics, failure class), the upload
result (model URI, failure reason), each read once into its typed result (operators/engine/results.py read_result:
an XCom an older release wrote, or a malformed one, reads as what it has and never fails the page), task states and times, and in a retraining run the decision of its
approve_promotion task. Four queries for every job of the instance, the rest is done in Python: sorting by a metric
needs every row anyway, and it stays well under a second for thousands of jobs (tests/plugins/test_jobs_scale.py
measures it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from airflow.models.dagrun import DagRun, DagRunNote
from airflow.models.taskinstance import TaskInstance as TI, TaskInstanceNote
from airflow.models.xcom import XComModel
from sqlalchemy import and_, func, or_, select

from operators.engine.results import LaunchSummary, UploadedArtifacts, read_result
from operators.stage_names import (
    LAUNCH_TRAINING, PREFETCH_DATA, PUBLISH_MODEL, RESTORE, STAGE_CODE, STAGE_LABELS, STAGES, UPLOAD_ARTIFACTS,
    VALIDATE_SPEC, WRITE_CONFIGS,
)
from training_console.list_filters import ListFilters
from training_console.queue_line import still_queued
from training_console.stop import is_stop_note

STAGING = (STAGE_CODE, PREFETCH_DATA, WRITE_CONFIGS, RESTORE)
UPLOAD = (UPLOAD_ARTIFACTS, PUBLISH_MODEL)
ACTIVE = {"running", "queued", "scheduled", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
RESULT_STAGES = (VALIDATE_SPEC, LAUNCH_TRAINING, UPLOAD_ARTIFACTS)  # whose return values the view reads
XCOM_STAGES = STAGES  # every stage: the "failure_reason" it recorded when it failed
FAILURE_REASON_KEY = "failure_reason"  # operators/stages/failure_reasons.py
QUEUE_KEY = "queue"  # operators/stages/launch_training.py: {queue, priority} of a Job waiting in Kueue
APPROVAL_TASK, APPROVAL_KEY = "approve_promotion", "decision"  # operators/pipelines/approval.py (retraining runs)


@dataclass
class Job:
    dag_id: str
    run_id: str
    map_index: int
    prefix: str  # "" or "<task group>."
    run_state: str | None = None
    run_after: datetime | None = None
    conf: Mapping[str, Any] = field(default_factory=dict)
    tis: dict[str, tuple] = field(default_factory=dict)  # stage -> (state, start, end, try_number)
    validated: dict[str, Any] | None = None  # the spec validate_spec pushed (None: not validated, or not a spec)
    launch: LaunchSummary | None = None  # launch_training's summary (a failed launch's "outcome")
    upload: UploadedArtifacts | None = None  # upload_artifacts' result
    reasons: dict[str, str] = field(default_factory=dict)  # stage -> why it failed (its XCom "failure_reason")
    run_note: str | None = None
    launch_note: str | None = None  # the note of this job's launch_training task instance
    queue: dict[str, Any] | None = None  # the Kueue queue launch_training recorded before it deferred
    queue_line: str | None = None  # the latest line of the task log about its place there (queue_line.py)
    approval: dict[str, Any] | None = None  # the run's approve_promotion decision, as that task recorded it

    @property
    def stop_note(self) -> str | None:
        """"Stopped by <user> at <time>" when the job was stopped (training_console/stop.py; the SDK's stop writes
        the run's note): a trial's own note, or the run's for a job that is the whole run."""
        if is_stop_note(self.launch_note):
            return self.launch_note
        if not self.prefix and is_stop_note(self.run_note):
            return self.run_note
        return None

    def approval_decision(self) -> dict[str, Any] | None:
        """The promotion decision of the run, for the job page: {asked, decision, by, reason, at, timed_out, timeout}
        (decision: approved | rejected, or "not required" / "gate rejected" when nobody was asked); None without one."""
        record = self.approval
        if not isinstance(record, dict) or not record.get("decision"):
            return None
        return {"asked": bool(record.get("asked")), "decision": record["decision"], "by": record.get("by"),
                "reason": record.get("reason") or "", "at": record.get("responded_at"),
                "timed_out": bool(record.get("timed_out")), "timeout": record.get("timeout")}

    def record_result(self, stage: str, value: Any) -> None:
        """One of RESULT_STAGES' XComs (decoded), read into its typed result; what is not one is None."""
        if stage == VALIDATE_SPEC:
            self.validated = value if isinstance(value, dict) else None
        elif stage == LAUNCH_TRAINING:
            self.launch = read_result(LaunchSummary, value)
        elif stage == UPLOAD_ARTIFACTS:
            self.upload = read_result(UploadedArtifacts, value)

    def stage_reason(self) -> str | None:
        """What the first failed stage recorded about its failure."""
        failed = next((s for s in STAGES if self.state(s) == "failed" and self.reasons.get(s)), None)
        return self.reasons.get(failed) if failed else None

    @property
    def spec(self) -> dict[str, Any]:
        """The spec validate_spec pushed, or {}: the raw conf of a refused spec never names files or connections."""
        return self.validated if self.validated is not None else {}

    @property
    def key(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "run_id": self.run_id, "map_index": self.map_index}

    def _requested_name(self) -> str:
        """The job_name the conf asked for, shown (only shown) while the spec is not validated."""
        name = self.conf.get("job_name") if not self.prefix and isinstance(self.conf, Mapping) else None
        return name if isinstance(name, str) else ""

    def state(self, stage: str) -> str | None:
        return (self.tis.get(stage) or (None,))[0]

    def waits_in_queue(self) -> bool:
        """launch_training is deferred with its Job in a Kueue queue, or runs waiting for the worker's GPUs: read its
        place from the task log."""
        return self.state(LAUNCH_TRAINING) in ("deferred", "running") and bool(self.queue)

    def queued_in(self) -> str | None:
        """The Kueue queue the job waits in, while it waits (not once Kueue admitted it)."""
        return self.queue.get("queue") if self.waits_in_queue() and still_queued(self.queue_line) else None

    def status(self) -> tuple[str, str | None]:
        """(succeeded | failed | stopped | running | queued, the stage that failed or stopped). A job someone stopped
        is "stopped" once it ended, never a failure of the platform or of the training."""
        status, stage = self._status()
        if status == "failed" and self.stop_note:
            return "stopped", stage
        return status, stage

    def _status(self) -> tuple[str, str | None]:
        for stage in STAGES:
            if self.state(stage) == "failed":
                return "failed", stage
        if self.queued_in():
            return "queued", None
        if self.state(LAUNCH_TRAINING) == "skipped":
            return "stopped", LAUNCH_TRAINING
        if any(self.state(s) in ACTIVE for s in STAGES):
            started = any(self.state(s) not in (None, "scheduled", "queued") for s in STAGES)
            return ("running" if started else "queued"), None
        if self.state(PUBLISH_MODEL) == "success":
            return "succeeded", None
        if self.state(UPLOAD_ARTIFACTS) == "upstream_failed" or self.state(PUBLISH_MODEL) == "upstream_failed":
            return "failed", _first(self, ("upstream_failed",)) or None
        if self.run_state == "success":
            return "succeeded", None  # the run ended well with publish_model skipped (nothing to publish)
        if self.run_state == "running" and any(self.state(s) == "success" for s in STAGES):
            return "running", None  # between two stages: the next is not scheduled yet
        return ("queued" if self.run_state in ("queued", "running", None) else (self.run_state or "queued")), None

    def durations(self, now: datetime) -> dict[str, float | None]:
        return {"staging": _span(self, STAGING, now), "training": _span(self, (LAUNCH_TRAINING,), now),
                "upload": _span(self, UPLOAD, now)}

    def created(self) -> datetime | None:
        start = self.tis.get(VALIDATE_SPEC)
        return self.run_after or (start[1] if start else None)

    def summary(self, now: datetime) -> dict[str, Any]:
        spec = self.spec
        status, failed_stage = self.status()
        launch, upload = self.launch, self.upload
        created = self.created()
        approval = self.approval_decision()
        return {
            **self.key,
            "task_prefix": self.prefix,
            "job_name": spec.get("job_name") or self._requested_name(),
            "base_job_name": spec.get("base_job_name") or "",
            "status": status,
            "failed_stage": failed_stage,
            "failed_stage_label": STAGE_LABELS.get(failed_stage) if failed_stage else None,
            "failure_class": launch.failure_class if launch and status == "failed" else None,
            "stopped_by": self.stop_note if status == "stopped" else None,
            "created": created.isoformat() if created else None,
            "durations": self.durations(now),
            "backend": spec.get("backend"),
            "layout": spec.get("layout"),
            "instance_count": spec.get("instance_count"),
            "resources": spec.get("resources") or {},
            "image_uri": spec.get("image_uri"),
            "metrics": dict(launch.metrics) if launch else {},
            "restarts": dict(launch.restarts) if launch else {},  # an elastic job's hosts started again: host -> times
            "model_uri": upload.model_uri if upload else None,
            "resume_from": spec.get("resume_from"),
            "tags": spec.get("tags") or {},
            "hyperparameters": spec.get("hyperparameters") or {},
            "queue": self.queued_in() if status == "queued" else None,
            "queue_line": self.queue_line if status == "queued" and self.queued_in() else None,
            **({"approval": approval} if approval else {}),  # retraining runs only
        }


def _first(job: Job, states: Iterable[str]) -> str | None:
    return next((s for s in STAGES if job.state(s) in states), None)


def _span(job: Job, stages: Iterable[str], now: datetime) -> float | None:
    starts = [job.tis[s][1] for s in stages if s in job.tis and job.tis[s][1]]
    if not starts:
        return None
    ends = [job.tis[s][2] or now for s in stages if s in job.tis and job.tis[s][1]]
    return round((max(ends) - min(starts)).total_seconds(), 1)


def decode_xcom(value: Any) -> Any:
    if isinstance(value, (bytes, str)):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _split(task_id: str) -> tuple[str, str] | None:
    """'trial.launch_training' -> ('trial.', 'launch_training'); None for a task that is not a stage."""
    prefix, _, stage = task_id.rpartition(".")
    if stage not in STAGES:
        return None
    return (prefix + "." if prefix else ""), stage


def load_jobs(session, *, dag_ids: Iterable[str] | None = None, run_id: str | None = None) -> list[Job]:
    """Every training job (optionally of some DAGs / one run), with its task states and recorded XComs."""
    def scoped(query, model):
        if dag_ids is not None:
            query = query.where(model.dag_id.in_(list(dag_ids)))
        if run_id is not None:
            query = query.where(model.run_id == run_id)
        return query

    stage_filter = or_(*(TI.task_id.like(f"%{s}") for s in STAGES))
    rows = session.execute(scoped(select(TI.dag_id, TI.run_id, TI.task_id, TI.map_index, TI.state, TI.start_date,
                                         TI.end_date, TI.try_number, TaskInstanceNote.content)
                                  .outerjoin(TaskInstanceNote, TaskInstanceNote.ti_id == TI.id)
                                  .where(stage_filter), TI)).all()
    jobs: dict[tuple, Job] = {}
    other: list[tuple] = []
    for dag_id, rid, task_id, map_index, state, start, end, try_number, note in rows:
        split = _split(task_id)
        if split is None:
            continue
        prefix, stage = split
        if stage == VALIDATE_SPEC:
            job = jobs.setdefault((dag_id, rid, prefix, map_index), Job(dag_id, rid, map_index, prefix))
            job.tis[stage] = (state, start, end, try_number)
        else:
            other.append((dag_id, rid, prefix, map_index, stage, (state, start, end, try_number), note))
    for dag_id, rid, prefix, map_index, stage, ti, note in other:
        job = jobs.get((dag_id, rid, prefix, map_index))
        if job is not None:
            job.tis[stage] = ti
            if stage == LAUNCH_TRAINING:
                job.launch_note = note
    if not jobs:
        return []
    job_dags = {k[0] for k in jobs}
    runs = session.execute(scoped(select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.run_after, DagRun.conf,
                                         DagRunNote.content)
                                  .outerjoin(DagRunNote, DagRunNote.dag_run_id == DagRun.id)
                                  .where(DagRun.dag_id.in_(job_dags)), DagRun)).all()
    run_info = {(d, r): (s, after, conf, note) for d, r, s, after, conf, note in runs}
    xcom_filter = or_(and_(XComModel.key.in_(("return_value", "outcome", FAILURE_REASON_KEY, QUEUE_KEY)),
                           or_(*(XComModel.task_id.like(f"%{s}") for s in XCOM_STAGES))),
                      and_(XComModel.task_id == APPROVAL_TASK, XComModel.key == APPROVAL_KEY))
    xcoms = session.execute(scoped(select(XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.map_index,
                                          XComModel.value, XComModel.key)
                                   .where(XComModel.dag_id.in_(job_dags), xcom_filter),
                                   XComModel)).all()
    for (dag_id, rid, prefix, map_index), job in jobs.items():
        state, after, conf, note = run_info.get((dag_id, rid), (None, None, None, None))
        job.run_state, job.run_after, job.run_note = state, after, note
        job.conf = decode_xcom(conf) or {}
    from_return: set[tuple] = set()  # (job, stage) whose return value was read: a failed launch's "outcome" yields
    for dag_id, rid, task_id, map_index, value, key in xcoms:  # "outcome": the summary of a failed launch
        if task_id == APPROVAL_TASK:  # the run's decision: its job is the run's one plain job
            job = jobs.get((dag_id, rid, "", map_index))
            if job is not None:
                record = decode_xcom(value)
                job.approval = record if isinstance(record, dict) else None
            continue
        split = _split(task_id)
        job = jobs.get((dag_id, rid, split[0], map_index)) if split else None
        if job is not None and key == FAILURE_REASON_KEY:
            reason = decode_xcom(value)
            job.reasons[split[1]] = reason if isinstance(reason, str) else str(reason)
        elif job is not None and key == QUEUE_KEY:
            queue = decode_xcom(value)
            job.queue = queue if isinstance(queue, dict) else None
        elif job is not None and split[1] in RESULT_STAGES and (id(job), split[1]) not in from_return:
            if key == "return_value":
                from_return.add((id(job), split[1]))
            job.record_result(split[1], decode_xcom(value))
    return list(jobs.values())


_CACHE: dict[tuple, tuple[tuple, list[Job]]] = {}


def load_jobs_cached(session, *, dag_ids: Iterable[str] | None = None) -> list[Job]:
    """load_jobs, reused while nothing changed: one aggregate query (row counts, newest update) decides. Finished
    jobs never change, so with a thousand of them the list costs that query instead of reading every row again."""
    key = tuple(sorted(dag_ids)) if dag_ids is not None else None
    version = (
        *session.execute(select(func.count(), func.max(TI.updated_at))).one(),
        *session.execute(select(func.count(), func.max(XComModel.timestamp))).one(),
        *session.execute(select(func.count(), func.max(DagRun.updated_at))).one(),
    )
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == version:
        return hit[1]
    jobs = load_jobs(session, dag_ids=dag_ids)
    if len(_CACHE) > 32:
        _CACHE.clear()
    _CACHE[(key)] = (version, jobs)
    return jobs


def _sort_value(row: Mapping[str, Any], sort: str):
    if sort.startswith("metric:"):
        return row["metrics"].get(sort[7:])
    if sort.startswith("duration:"):
        return (row["durations"] or {}).get(sort[9:])
    return row.get(sort)


def group_searches(jobs: list[Job], now: datetime) -> list[dict[str, Any]]:
    """List items: a plain job is one item; the trials of one search run are one item with the best trial marked."""
    items: list[dict[str, Any]] = []
    searches: dict[tuple, dict[str, Any]] = {}
    for job in jobs:
        row = job.summary(now)
        if not job.prefix:
            items.append({"kind": "job", **row})
            continue
        key = (job.dag_id, job.run_id)
        search = searches.get(key)
        if search is None:
            conf = job.conf or {}
            search = {"kind": "search", "dag_id": job.dag_id, "run_id": job.run_id,
                      "job_name": conf.get("job_name") or _search_name(row["job_name"]) or job.run_id, "objective": conf.get("objective"),
                      "direction": conf.get("direction") or "minimize", "trials": [], "run_state": job.run_state}
            searches[key] = search
            items.append(search)
        search["trials"].append(row)
    for search in searches.values():
        trials = sorted(search["trials"], key=lambda r: r["map_index"])
        search["trials"] = trials
        objective = search["objective"]
        scored = [t for t in trials
                  if t["status"] == "succeeded" and isinstance(t["metrics"].get(objective), (int, float))]
        best = (max if search["direction"] == "maximize" else min)(
            scored, key=lambda t: t["metrics"][objective]) if scored else None
        for t in trials:
            t["best"] = t is best
        statuses = {t["status"] for t in trials}
        search["status"] = ("running" if statuses & {"running", "queued"} else
                            "succeeded" if best is not None else "stopped" if statuses == {"stopped"} else "failed")
        search["failed_stage"] = search["failed_stage_label"] = None
        search["created"] = min((t["created"] for t in trials if t["created"]), default=None)
        search["metrics"] = best["metrics"] if best else {}
        search["best_job_name"] = best["job_name"] if best else None
        search["base_job_name"] = trials[0]["base_job_name"] if trials else ""
        search["tags"] = trials[0]["tags"] if trials else {}
        search["hyperparameters"] = {}  # a search's trials differ in them: each trial's row has its own
        for name in ("backend", "layout", "instance_count", "resources", "image_uri"):
            search[name] = trials[0][name] if trials else None
        search["durations"] = {k: _sum(t["durations"][k] for t in trials) for k in ("staging", "training", "upload")}
    return items


def _search_name(trial_name: str) -> str:
    """The search's name from a trial's: trials are named <search>-t<NN> (operators/pipelines/search.py)."""
    head, sep, number = trial_name.rpartition("-t")
    return head if sep and number.isdigit() else ""


def _sum(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present), 1) if present else None


def query_items(jobs: list[Job], *, status: str | None = None, dag_id: str | None = None, q: str | None = None,
                run_id: str | None = None, filters: ListFilters | None = None,
                sort: str = "created", descending: bool = True, offset: int = 0, limit: int = 50,
                now: datetime | None = None) -> dict[str, Any]:
    """Filter, sort and paginate the list (a search counts as one item; it matches if one of its trials does).
    Besides the page: every metric, hyperparameter and tag name of the jobs (the page's column and filter choices)."""
    now = now or datetime.now(timezone.utc)
    items = group_searches(jobs, now)
    rows = [row for item in items for row in (item.get("trials") or [item])]
    metric_names = sorted({m for item in items for m in (item.get("metrics") or {})})
    dag_ids = sorted({item["dag_id"] for item in items})
    hyperparameter_names = sorted({h for row in rows for h in row.get("hyperparameters") or {}})
    tag_names = sorted({t for row in rows for t in row.get("tags") or {}})

    def matches(row: Mapping[str, Any]) -> bool:
        if status and row["status"] != status:
            return False
        if dag_id and row["dag_id"] != dag_id:
            return False
        if run_id and row["run_id"] != run_id:
            return False
        if q and q.lower() not in f"{row.get('job_name', '')} {row.get('base_job_name', '')} {row['run_id']}".lower():
            return False
        return filters is None or filters.matches(row)

    selected = [i for i in items if matches(i) or any(matches(t) for t in i.get("trials", ()))]
    present = [i for i in selected if _sort_value(i, sort) is not None]
    missing = [i for i in selected if _sort_value(i, sort) is None]
    present.sort(key=lambda i: _sort_value(i, sort), reverse=descending)
    ordered = present + missing  # rows without the value go last whatever the direction
    return {"total": len(ordered), "offset": offset, "limit": limit, "items": ordered[offset: offset + limit],
            "metric_names": metric_names, "dag_ids": dag_ids, "hyperparameter_names": hyperparameter_names,
            "tag_names": tag_names}

"""A job's lineage in the console (GET /training-jobs/api/jobs/{dag_id}/{run_id}/{map_index}/lineage): what made its
model, from the record the upload stage KEPT in the job's state directory (operators/lineage/record.py read_record:
platform state, no tenant writes there), and the chain of parent models back to the first one.

The parents' records are the published copies beside their models (lineage_uri_beside): the output prefix is the
tenant's, so each is untrusted input: read through the storage hook with the viewed job's connections, at most
MAX_RECORD_BYTES, parsed as a LineageRecord (another schema, not JSON: refused), at most MAX_CHAIN links, stopped at a
cycle; a local one is opened without following a link and only inside what this Airflow lets jobs use
(spec_access.check_served_paths). A parent is followed only when it is a job the user may read (its DAG readable, its
spec naming that model); any other parent is named by its URI and the chain stops there, with one line saying why.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Iterable

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import APIRouter, Depends, HTTPException

from operators.fs.job_root import JobRoot
from operators.job_outputs import MODEL, job_of_model_uri
from operators.lineage.record import LineageError, LineageRecord, ParentModel, read_record, record_dict
from operators.settings import training_settings
from training_console.artifacts import output_uri, storage_of
from training_console.jobs import Job, load_jobs, load_jobs_cached
from training_console.spec_access import THIS_RUN, check_served_paths, files_owner

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 256 * 1024  # a record is a few KiB; a parent's published copy larger than this is not read
MAX_CHAIN = 20  # parents followed back from one job
NO_RECORD = ("no lineage record for this run: it ended before its upload stage kept one, or it ran before the "
             "platform recorded lineage")
ELSEWHERE = ("no lineage record kept where this Airflow keeps job state: the upload ran in the cluster's data plane "
             "([training.kubernetes] data_plane = cluster), which keeps it there; it is published at {uri}")
CAN_READ_RUN = Depends(requires_access_dag("GET", DagAccessEntity.RUN))

router = APIRouter()


class ReadableJobs:
    """The jobs of the DAGs the user may read (`jobs()`: loaded once, when first asked), found by their model or run."""

    def __init__(self, jobs: Callable[[], Iterable[Job]]):
        self._load = jobs
        self._jobs: list[Job] | None = None

    def _all(self) -> list[Job]:
        if self._jobs is None:
            self._jobs = list(self._load())
        return self._jobs

    def by_model(self, model_uri: str | None) -> Job | None:
        """The readable job whose validated spec publishes `model_uri` (<output_path>/<job_name>/output/model.tar.gz)."""
        name = job_of_model_uri(model_uri)
        if name is None:
            return None
        for job in self._all():
            if job.spec.get("job_name") == name and output_uri(job.spec) and output_uri(job.spec) + MODEL == model_uri:
                return job
        return None

    def by_run(self, dag_id: str | None, run_id: str | None, job_name: str) -> Job | None:
        for job in self._all():
            if job.dag_id == dag_id and job.run_id == run_id and job.spec.get("job_name") == job_name:
                return job
        return None


def kept_record(job: Job, workspace: str | None = None) -> LineageRecord | None:
    """The record the job's upload stage kept, when the job's state directory is this run's and the record names this
    run; None otherwise (raises LineageError/OSError for a kept copy that cannot be read)."""
    name = job.spec.get("job_name")
    if not name or files_owner(job) != THIS_RUN:
        return None
    record = read_record(workspace or training_settings().workspace, name)
    if record is None or (record.airflow.dag_id, record.airflow.run_id) != (job.dag_id, job.run_id):
        return None  # the name's state directory holds an earlier run's record (or none): not this run's lineage
    return record


def lineage_or_none(job: Job) -> LineageRecord | None:
    """kept_record, with an unreadable kept copy as None (the compare view shows what it can)."""
    try:
        return kept_record(job)
    except (OSError, ValueError) as err:
        log.warning("the lineage record of %s could not be read: %s", job.spec.get("job_name"), err)
        return None


def _one_line(err: BaseException) -> str:
    if isinstance(err, HTTPException):
        return str(err.detail)
    lines = str(err).strip().splitlines()
    return lines[0][:300] if lines else type(err).__name__


def read_published(storage, uri: str) -> LineageRecord:
    """A parent's published record at `uri` (tenant-writable: untrusted); LineageError, one line, when it is not one
    this view reads."""
    local = storage.local_path(uri)
    if local is not None:
        check_served_paths({"output_path": uri})  # 403 outside what jobs may use: the caller says why in one line
        fd, _st = JobRoot(os.path.dirname(local)).open_file(os.path.basename(local))  # no link followed
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    else:
        sizes = [o.size for o in storage.list_objects(uri)]
        if not sizes:
            raise LineageError(f"{uri} does not exist")
        if max(sizes) > MAX_RECORD_BYTES:
            raise LineageError(f"{uri} is larger than {MAX_RECORD_BYTES} bytes: not read as a lineage record")
        data = storage.read_bytes(uri)
    if len(data) > MAX_RECORD_BYTES:
        raise LineageError(f"{uri} is larger than {MAX_RECORD_BYTES} bytes: not read as a lineage record")
    return LineageRecord.from_json(data)


def _job_ref(job: Job | None) -> dict[str, Any] | None:
    return None if job is None else {**job.key, "job_name": job.spec.get("job_name")}


def _summary(record: LineageRecord) -> dict[str, Any]:
    """What a parent's record says made it (shown under its link in the chain)."""
    return {"job_name": record.job_name, "created_at": record.created_at, "code_digest": record.code.digest,
            "data_versions": record.data_versions, "image": record.image.name, "image_digest": record.image.digest,
            "hyperparameters": record.hyperparameters, "outcome": record.outcome.status}


def parent_chain(parent: ParentModel | None, storage, readable: ReadableJobs) -> tuple[list[dict[str, Any]], str | None]:
    """The parents from `parent` back to the first model: [{requested, model_uri, lineage_uri, job_name, job, record}]
    and one line when the chain stopped before a model without a parent (None when it reached it)."""
    links: list[dict[str, Any]] = []
    seen: set[str] = set()
    while parent is not None:
        if len(links) >= MAX_CHAIN:
            return links, f"the chain is cut after {MAX_CHAIN} parents"
        key = parent.model_uri or parent.requested
        if key in seen:
            return links, f"{key} appears twice in the chain (a cycle): stopped there"
        seen.add(key)
        job = readable.by_model(parent.model_uri)
        link = {"requested": parent.requested, "model_uri": parent.model_uri, "lineage_uri": parent.lineage_uri,
                "job_name": job_of_model_uri(parent.model_uri), "job": _job_ref(job), "record": None}
        links.append(link)
        if parent.model_uri is None:
            return links, f"resume_from {parent.requested!r} found no model: no parent to follow"
        if job is None:
            return links, f"{parent.model_uri} is not the model of a job you may read: its lineage is not followed"
        if not parent.lineage_uri:
            return links, f"{parent.model_uri} names no lineage record: the chain stops there"
        try:
            record = read_published(storage, parent.lineage_uri)
        except Exception as err:  # noqa: BLE001 - a tenant's file: whatever is wrong with it is one line, not a 500
            return links, f"{parent.lineage_uri}: {_one_line(err)}; the chain stops there"
        link["record"] = _summary(record)
        parent = record.parent
    return links, None


def job_lineage(job: Job, readable: ReadableJobs, workspace: str | None = None) -> dict[str, Any]:
    """The lineage panel's data: {record, note, reproduces, parents, chain_note}."""
    empty = {"record": None, "reproduces": None, "parents": [], "chain_note": None}
    try:
        record = kept_record(job, workspace)
    except (OSError, ValueError) as err:
        return {**empty, "note": f"the lineage record of this run cannot be read: {_one_line(err)}"}
    if record is None:
        published = job.upload.lineage_uri if job.upload and files_owner(job) == THIS_RUN else None
        return {**empty, "note": ELSEWHERE.format(uri=published) if published else NO_RECORD}
    if job.spec:
        check_served_paths(job.spec)
    reproduces = None
    if record.reproduces is not None:
        ref = record.reproduces
        reproduces = {**ref.model_dump(), "job": _job_ref(readable.by_run(ref.dag_id, ref.run_id, ref.job_name))}
    parents, chain_note = parent_chain(record.parent, storage_of(job.spec), readable)
    return {"record": record_dict(record), "note": None, "reproduces": reproduces, "parents": parents,
            "chain_note": chain_note}


@router.get("/api/jobs/{dag_id}/{run_id}/{map_index}/lineage", dependencies=[CAN_READ_RUN])
def get_lineage(dag_id: str, run_id: str, map_index: int, session: SessionDep, user: GetUserDep) -> dict[str, Any]:
    """The job's lineage: its kept record and its parents' chain (404 for no such job; only readers reach it)."""
    job = next((j for j in load_jobs(session, dag_ids=[dag_id], run_id=run_id) if j.map_index == map_index), None)
    if job is None:
        raise HTTPException(404, f"no training job in DAG {dag_id!r} run {run_id!r} (map index {map_index})")
    readable = set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session))
    return job_lineage(job, ReadableJobs(lambda: load_jobs_cached(session, dag_ids=readable)))

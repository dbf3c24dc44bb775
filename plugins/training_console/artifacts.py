"""A job's files: where the pipeline put them, and how a browser gets them.

Local paths (the embedded default, file:// URIs) are streamed by the plugin itself; object-storage URIs redirect to a
short-lived presigned https URL (default) or to the provider's console page, per airflow.cfg
[training] artifact_links = presigned | console, [training] presigned_url_seconds. While a job runs, its metrics are
read from the job root in the workspace (the launch stage rewrites metrics.json there every few seconds, and scripts
may append points to output/metrics.jsonl); afterwards from the uploaded metrics.json.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Mapping

from fastapi import HTTPException
from fastapi.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from training_runtime.contract import METRICS_STREAM

from operators.console_urls import console_url
from operators.engine.results import UploadedArtifacts
from operators.fs.job_root import JobRoot
from operators.job_outputs import FAILURE, METRICS, MODEL, OUTPUT_ARCHIVE, OUTPUT_DIR, job_of_model_uri, job_output_uri
from operators.launch.outcome import read_failure_reason
from operators.settings import training_settings
from operators.storage.hook import ObjectStorageHook
from operators.tracking.metrics import MetricCollector
from training_console.jobs import load_jobs_cached

log = logging.getLogger(__name__)
MEDIA = {MODEL: "application/gzip", OUTPUT_ARCHIVE: "application/gzip", METRICS: "application/json",
         FAILURE: "text/plain; charset=utf-8"}


def output_uri(spec: Mapping[str, Any]) -> str | None:
    if not spec.get("output_path") or not spec.get("job_name"):
        return None
    return job_output_uri(spec["output_path"], spec["job_name"])


def storage_of(spec: Mapping[str, Any]):
    """The storage hook with the job's own connections (its validated spec's)."""
    return ObjectStorageHook(connections=spec.get("connections") or {})



def _job_root(spec: Mapping[str, Any]) -> str | None:
    if not spec.get("job_name"):
        return None
    return training_settings().job_root(spec["job_name"])


def describe(spec: Mapping[str, Any], upload: UploadedArtifacts | None,
             launch_state: str | None) -> list[dict[str, Any]]:
    """The artifacts the upload stage reported (name, URI), plus where checkpoints go."""
    out = output_uri(spec)
    uploaded = dict(upload.artifacts) if upload else {}
    rows = [{"name": name, "uri": uri, "available": True} for name, uri in uploaded.items()]
    if out and not uploaded:  # not uploaded yet (running) or the upload never ran: say where they will be
        rows = [{"name": name, "uri": out + name, "available": False} for name in (MODEL, METRICS)]
    if spec.get("checkpoint_path"):
        rows.append({"name": "checkpoints", "uri": spec["checkpoint_path"], "available": None})
    return rows


def failure_reason(spec: Mapping[str, Any], upload: UploadedArtifacts | None,
                   launch_state: str | None) -> str | None:
    """The runtime's failure file: from the upload result, else the job root (the upload may not have run)."""
    if upload and upload.failure:
        return upload.failure.strip()
    root = _job_root(spec)
    if root and launch_state in ("failed", "skipped", "up_for_retry"):
        return read_failure_reason(root)  # the tenant's file: no link followed (operators/fs)
    return None


def hosts(spec: Mapping[str, Any]) -> list[str]:
    count = int(spec.get("instance_count") or 1)
    return [f"algo-{i + 1}" for i in range(count)]


def parent_of(session, resume_from: str | None, dag_ids=None) -> dict[str, Any] | None:
    """The job whose model a resumed job started from, named by the URI: <output_path>/<job>/output/model.tar.gz;
    looked for only in `dag_ids` (the DAGs the caller may read), when given."""
    parent_name = None if resume_from == "latest" else job_of_model_uri(resume_from)
    if parent_name is None:
        return {"job_name": None, "uri": resume_from} if resume_from else None
    for job in load_jobs_cached(session, dag_ids=dag_ids):
        if job.spec.get("job_name") == parent_name:
            return {"job_name": parent_name, "uri": resume_from, **job.key}
    return {"job_name": parent_name, "uri": resume_from}


def metrics(spec: Mapping[str, Any], *, live: bool, recorded: Any = None) -> dict[str, Any]:
    """{"final": {...}, "series": {name: [{"step", "value", "timestamp"}]}}, live from the job root when running;
    `recorded`: what the launch task recorded where it could not write the job root (the cluster's data plane), used
    when neither the job root nor the output has a metrics.json."""
    root = _job_root(spec)
    data: Any = None
    if root:
        try:  # the job root's: read without following a link; every point is checked below
            data = JobRoot(root).read_json(f"{OUTPUT_DIR}/{METRICS}")
        except (OSError, ValueError):
            data = None
    if data is None and not live and output_uri(spec):
        try:
            data = json.loads(storage_of(spec).read_bytes(output_uri(spec) + METRICS))
        except Exception as err:  # noqa: BLE001 - no metrics is a normal state (failed early, no definitions)
            log.debug("no metrics.json for %s: %s", spec.get("job_name"), err)
    if data is None:
        data = recorded
    collector = MetricCollector()
    collector.load_series(data.get("series") if isinstance(data, dict) else None)
    if live and root:  # points the script appended itself join only until the final metrics.json includes them
        collector.read_file(os.path.join(root, METRICS_STREAM), job_root=root)
    return collector.to_json()


def stream_file(directory: str, rel: str, media_type: str | None, filename: str | None) -> Response | None:
    """The regular file `rel` below `directory`, streamed from the descriptor it was checked on (operators/fs: a
    link there is not followed); None when there is no such regular file."""
    try:
        fd, st = JobRoot(directory).open_file(rel)
    except (OSError, ValueError) as err:
        if not isinstance(err, FileNotFoundError):
            log.warning("artifact %s not served: %s", rel, err)
        return None
    handle = os.fdopen(fd, "rb")

    def chunks():
        with handle:
            while block := handle.read(1024 * 1024):
                yield block

    headers = {"Content-Length": str(st.st_size)}
    if filename:
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return StreamingResponse(chunks(), media_type=media_type, headers=headers)


def respond(spec: Mapping[str, Any], name: str) -> Response:
    """A local artifact is streamed; an object-storage one redirects (presigned URL or console)."""

    out = output_uri(spec)
    if not out:
        raise HTTPException(404, "the job has no output path (its spec was not validated)")
    uri = out + name
    if name == METRICS:  # metrics of a running job live in the job root
        root = _job_root(spec)
        if root and storage_of(spec).local_path(uri) is None:
            response = stream_file(root, f"{OUTPUT_DIR}/{METRICS}", MEDIA[name], None)
            if response is not None:
                return response
    local = storage_of(spec).local_path(uri)  # the local store's file is streamed; a remote object is linked
    if local is not None:
        response = stream_file(os.path.dirname(local), name, MEDIA.get(name),
                                None if name in (FAILURE, METRICS) else f"{spec['job_name']}-{name}")
        if response is None:
            if name == FAILURE:
                return PlainTextResponse("no failure recorded for this job\n", status_code=404)
            raise HTTPException(404, f"{uri} does not exist (yet)")
        return response
    return remote_link(spec, uri, name)


def remote_link(spec: Mapping[str, Any], uri: str, name: str) -> Response:
    """An object in object storage: a redirect to the provider's console page or to a presigned URL, per
    [training] artifact_links."""
    settings = training_settings()
    if settings.artifact_links == "console":
        target = console_url(uri)
        if target:
            return RedirectResponse(target, status_code=307)
    try:
        target = storage_of(spec).presigned_url(uri, settings.presigned_url_seconds)
    except Exception as err:  # noqa: BLE001 - one line, no credentials
        raise HTTPException(502, f"could not sign a URL for {uri}: {err}") from None
    log.info("artifact %s of %s: redirect to a presigned URL valid %d s", name, spec.get("job_name"),
             settings.presigned_url_seconds)
    return RedirectResponse(target, status_code=307)

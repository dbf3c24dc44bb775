"""Every file under a job's output prefix (<output_path>/<job_name>/output/), for the job page: listed, downloaded
through the same links as the artifacts (streamed when local, a presigned or console link when in object storage:
training_console/artifacts.py), and previewed when it is text or JSON.

What a job writes is untrusted input: a local listing walks the directory without following a link
(operators/fs/job_root.py), a file is served only when the listing of the job's own prefix holds it (a name with
'..' or a leading '/' never becomes a path or key), downloads are attachments of type application/octet-stream (a
job's HTML never renders in Airflow's origin), and a preview is data the page escapes.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from typing import Any, Mapping

from fastapi import HTTPException
from fastapi.responses import Response

from training_console.artifacts import output_uri, remote_link, storage_of, stream_file

from operators.fs.job_root import JobRoot
from operators.job_outputs import FAILURE

log = logging.getLogger(__name__)

MAX_FILES = 2000  # listed; a job that wrote more says so (truncated) and the page names the prefix
PREVIEW_BYTES = 64 * 1024  # shown inline, the rest cut
REMOTE_PREVIEW_MAX = 4 * 1024 * 1024  # an object is read whole to preview it: larger ones are only linked
TEXT_SUFFIXES = (".txt", ".log", ".json", ".jsonl", ".csv", ".tsv", ".yaml", ".yml", ".md", ".out", ".err", ".ini",
                 ".cfg", ".toml", ".py", ".sh")
TEXT_NAMES = (FAILURE,)  # the failure reason: text without a suffix
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _local_dir(spec: Mapping[str, Any]) -> str | None:
    out = output_uri(spec)
    return storage_of(spec).local_path(out) if out else None


def list_files(spec: Mapping[str, Any]) -> dict[str, Any]:
    """{"prefix", "files": [{"path", "size", "modified"}], "truncated"}: the output prefix, recursively."""
    out = output_uri(spec)
    if not out:
        raise HTTPException(404, "the job has no output path (its spec was not validated)")
    files: list[dict[str, Any]] = []
    local = _local_dir(spec)
    try:
        if local is not None:
            files = _local_files(local)
        else:
            files = [{"path": o.relative_path, "size": o.size, "modified": o.last_modified or None}
                     for o in storage_of(spec).list_objects(out)[: MAX_FILES + 1]]
    except HTTPException:
        raise
    except Exception as err:  # noqa: BLE001 - one line, no credentials (StorageError says which URI and why)
        raise HTTPException(502, f"could not list {out}: {err}") from None
    return {"prefix": out, "files": files[:MAX_FILES], "truncated": len(files) > MAX_FILES}


def _local_files(directory: str) -> list[dict[str, Any]]:
    if not os.path.isdir(directory):
        return []  # nothing uploaded (yet)
    files = []
    for entry in JobRoot(directory).walk():
        if not entry.is_dir:
            files.append({"path": entry.rel, "size": entry.stat.st_size, "modified": entry.stat.st_mtime})
            if len(files) > MAX_FILES:
                break
    return files


def _listed(spec: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The listing's entry for `path`: a file is served only if it is one of the job's own."""
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in path.split("/")):
        raise HTTPException(400, f"{path!r} is not a file name below the job's output; pick one from its list")
    for entry in list_files(spec)["files"]:
        if entry["path"] == path:
            return entry
    raise HTTPException(404, f"{output_uri(spec)}{path} is not among the job's output files")


def download(spec: Mapping[str, Any], path: str) -> Response:
    """The file as an attachment (local: streamed without following a link) or the store's link to it."""
    _listed(spec, path)
    local = _local_dir(spec)
    if local is None:
        return remote_link(spec, output_uri(spec) + path, posixpath.basename(path))
    name = _UNSAFE_NAME.sub("_", f"{spec['job_name']}-{path.replace('/', '-')}")
    response = stream_file(local, path, "application/octet-stream", name)
    if response is None:
        raise HTTPException(404, f"{output_uri(spec)}{path} is gone or is not a regular file")
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def is_text(path: str) -> bool:
    name = posixpath.basename(path).lower()
    return name in TEXT_NAMES or name.endswith(TEXT_SUFFIXES)


def preview(spec: Mapping[str, Any], path: str) -> dict[str, Any]:
    """{"path", "size", "kind": "json" | "text", "text", "truncated"}: the first PREVIEW_BYTES, as text."""
    entry = _listed(spec, path)
    if not is_text(path):
        raise HTTPException(415, f"{path} is not previewed (only text and JSON: {', '.join(TEXT_SUFFIXES)}); "
                                 "download it instead")
    local = _local_dir(spec)
    try:
        if local is not None:
            data = JobRoot(local).read_bytes(path, PREVIEW_BYTES + 1)
        elif entry["size"] <= REMOTE_PREVIEW_MAX:
            data = storage_of(spec).read_bytes(output_uri(spec) + path)[: PREVIEW_BYTES + 1]
        else:
            raise HTTPException(413, f"{path} is {entry['size']} bytes: too large to preview from object storage "
                                     "(download it instead)")
    except HTTPException:
        raise
    except Exception as err:  # noqa: BLE001 - one line
        raise HTTPException(502, f"could not read {output_uri(spec)}{path}: {err}") from None
    if b"\0" in data:
        raise HTTPException(415, f"{path} holds binary data; download it instead")
    text = data[:PREVIEW_BYTES].decode("utf-8", errors="replace")
    kind = "json" if path.lower().endswith(".json") else "text"
    return {"path": path, "size": entry["size"], "kind": kind, "text": text, "truncated": len(data) > PREVIEW_BYTES}

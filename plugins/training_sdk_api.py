"""The SDK's endpoints on the Airflow API server (a FastAPI app mounted at /training-sdk), for what the REST API lacks:

  PUT /training-sdk/code/<sha256>.tar.gz?dag_id=D   a packed source_dir (the request body) into the caller's own part of
                                                    the workspace's staging area,
                                                    `<workspace>/staging/code/<user>/<sha256>.tar.gz`; answers the path
                                                    to use as the job's source_dir. Code, not data: bodies larger than
                                                    [training] sdk_code_max_bytes (default 64 MiB) are refused (413),
                                                    and so is an upload that would take the caller's staged code over
                                                    [training] sdk_code_quota_bytes (default 512 MiB), concurrent
                                                    uploads of the same user included.
                                                    Content-addressed: the same code is stored once per user (uploading
                                                    it again refreshes its expiry); the body must hash to the name (a
                                                    truncated upload never becomes a source_dir).
  GET /training-sdk/code                            the caller's staged archives (name, sha256, bytes, uploaded_at,
                                                    expires_at, source_dir) and their quota use (used_bytes,
                                                    quota_bytes, expiry_days).
  DELETE /training-sdk/code/<sha256>.tar.gz         removes the caller's own archive of that name (404 if they have
                                                    none); never another user's.

An archive expires [training] sdk_code_expiry_days (default 30; 0 = never) after its last upload: the caller's expired
archives are removed when they upload or list, every user's by the workspace's garbage collection
(operators/state/retention.py).

PUT needs the caller's API token (the same bearer token as the REST API), an existing DAG D and the right to trigger it;
GET and DELETE need a logged-in user only: they act on the caller's own directory, named from the caller's identity,
never from the request. Every state-changing request passes the plugins' cross-site request forgery guard
(training_console/web_boundary.py: the SDK's bearer token satisfies it).
The first task accepts a staged source_dir only from the user who triggered the run (operators/staging/sdk_uploads.py).
/openapi.json and /docs need a logged-in user too. (Job metrics come from the training-jobs view's API,
plugins/training_console.)
"""

import asyncio
import functools
import hashlib
import os
import re
import tempfile
from datetime import datetime, timezone

from airflow.plugins_manager import AirflowPlugin

import airflow_training_jobs  # noqa: F401 - one line if 'operators' is another package (see there)

URL_PREFIX = "/training-sdk"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations (Request) at runtime.


def _max_bytes() -> int:
    from operators.settings import sdk_code_max_bytes  # [training] is read in one place

    return sdk_code_max_bytes()


def _quota_bytes() -> int:
    from operators.settings import sdk_code_quota_bytes

    return sdk_code_quota_bytes()


def _expiry_days() -> float:
    from operators.settings import sdk_code_expiry_days

    return sdk_code_expiry_days()


# While an upload streams, the user's directory is checked every QUOTA_CHECK_BYTES written (see upload_code).
QUOTA_CHECK_BYTES = 1024 * 1024


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


@functools.cache
def create_app():
    from fastapi import Depends, FastAPI, HTTPException, Request

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag

    from training_console.docs_behind_login import add_docs_behind_login
    from training_console.web_boundary import refuse_cross_site

    app = FastAPI(title="training-sdk", description="Code upload for the training_sdk client", openapi_url=None,
                  docs_url=None, redoc_url=None, dependencies=[Depends(refuse_cross_site)])
    add_docs_behind_login(app)

    def archive_name(name: str) -> str:
        if not name.endswith(".tar.gz") or not _SHA256.match(name.removesuffix(".tar.gz")):
            raise HTTPException(400, f"name the archive <sha256 of the archive>.tar.gz (64 lowercase hex digits), "
                                     f"not {name[:100]!r}")
        return name

    @app.put("/code/{name}", dependencies=[Depends(requires_access_dag("POST", DagAccessEntity.RUN))])
    async def upload_code(name: str, request: Request, dag_id: str, user: GetUserDep):
        from operators.settings import training_settings
        from operators.staging.sdk_uploads import expire, quota_lock, used_bytes

        sha = archive_name(name).removesuffix(".tar.gz")
        if not _dag_exists(dag_id):
            raise HTTPException(404, f"DAG {dag_id!r} does not exist; upload code for the DAG you will trigger "
                                     "(dag_id=...)")
        limit = _max_bytes()
        declared = request.headers.get("content-length")
        if declared and int(declared) > limit:
            raise HTTPException(413, f"code archive of {int(declared)} bytes is over the {limit}-byte limit "
                                     f"([training] sdk_code_max_bytes); leave data out of source_dir")
        settings = training_settings()
        staging = settings.user_code_dir(user.get_name())
        os.makedirs(staging, exist_ok=True)
        expire(staging, _expiry_days())  # one small directory
        final = os.path.join(staging, name)
        quota = _quota_bytes()

        def over_quota(kept: int) -> HTTPException:
            return HTTPException(413, f"your staged code would pass your quota of {quota} bytes ([training] "
                                      f"sdk_code_quota_bytes; {kept} bytes kept or being uploaded besides this "
                                      f"upload); delete archives you no longer need (GET, then DELETE "
                                      f"{URL_PREFIX}/code/<name>) or ask an admin to raise the quota")

        kept = used_bytes(staging, besides=final)
        if declared and kept + int(declared) > quota:
            raise over_quota(kept)
        # The quota under concurrent uploads of one user (several requests, several API server workers): the check
        # that decides is the last one, made after the whole body is on disk, under a short flock of the user's
        # directory together with the rename that keeps the archive (keep, below). Kept archives therefore change
        # only one upload at a time, and each sees every archive kept before it: whatever the interleaving, the kept
        # archives never pass the quota, and of two uploads that do not fit together exactly one is kept. A lock
        # rather than "every upload checks after writing" alone: a directory listed while another upload renames
        # its file may miss that file. The checks while streaming (every QUOTA_CHECK_BYTES, no lock) count the
        # other uploads in flight too: they refuse early and bound the disk that parallel uploads can fill.
        digest, size, checked = hashlib.sha256(), 0, 0
        fd, partial = tempfile.mkstemp(prefix=f".{sha[:12]}.", suffix=".partial", dir=staging)
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise HTTPException(413, f"code archive is over the {limit}-byte limit "
                                                 f"([training] sdk_code_max_bytes); leave data out of source_dir")
                    digest.update(chunk)
                    out.write(chunk)
                    if size - checked >= QUOTA_CHECK_BYTES:
                        out.flush()  # the others' checks see this upload's bytes
                        checked = size
                        others = used_bytes(staging, besides=(final, partial))
                        if others + size > quota:
                            raise over_quota(others)
            if digest.hexdigest() != sha:
                raise HTTPException(400, f"the upload hashes to {digest.hexdigest()}, not {sha}: it was truncated "
                                         f"or altered; upload again")

            def keep() -> None:
                with quota_lock(staging):
                    others = used_bytes(staging, besides=(final, partial), archives_only=True)
                    if others + size > quota:
                        raise over_quota(others)
                    try:
                        os.utime(final)  # the same code again: its expiry starts over (content-addressed)
                    except FileNotFoundError:
                        os.chmod(partial, 0o644)
                        os.replace(partial, final)

            await asyncio.to_thread(keep)  # may wait for another upload's keep: off the event loop
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        return {"source_dir": final, "bytes": size, "sha256": sha,
                "default_output_path": settings.models_dir}

    # GET and DELETE: a logged-in user, acting on their own directory only (named from the caller's identity, never
    # from the request). No Airflow resource fits staged code, and none is needed: nobody reaches another user's
    # archives here, and what one's own archives may run as is checked where they are used (the PUT's right to
    # trigger the DAG, the first task's check of the triggering user).
    @app.get("/code")
    def list_code(user: GetUserDep) -> dict:
        from operators.settings import training_settings
        from operators.staging.sdk_uploads import expire, staged_archives, used_bytes

        staging = training_settings().user_code_dir(user.get_name())
        expiry_days = _expiry_days()
        expired = expire(staging, expiry_days)
        archives = [{"name": a.name, "sha256": a.name.removesuffix(".tar.gz"), "bytes": a.bytes,
                     "uploaded_at": _iso(a.mtime), "source_dir": a.path,
                     "expires_at": _iso(a.mtime + expiry_days * 86400) if expiry_days > 0 else None}
                    for a in staged_archives(staging)]
        return {"archives": archives, "used_bytes": used_bytes(staging), "quota_bytes": _quota_bytes(),
                "expiry_days": expiry_days, "expired": expired}

    @app.delete("/code/{name}")
    def delete_code(name: str, user: GetUserDep) -> dict:
        from operators.settings import training_settings

        path = os.path.join(training_settings().user_code_dir(user.get_name()), archive_name(name))
        try:
            size = os.stat(path, follow_symlinks=False).st_size
            os.unlink(path)
        except FileNotFoundError:
            raise HTTPException(404, f"you have no staged code named {name}; GET {URL_PREFIX}/code lists yours "
                                     "(another user's code is never yours to delete)") from None
        return {"deleted": name, "bytes": size}

    return app


def _dag_exists(dag_id: str) -> bool:
    """A DAG the dag-processor knows and has not marked stale (the right to trigger it is checked by the route)."""
    from sqlalchemy import select

    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        stale = session.scalar(select(DagModel.is_stale).where(DagModel.dag_id == dag_id))
    return stale is False


class _FastAPIApps:
    """Built only where it is read (the API server): every task process loads the plugins too, and importing FastAPI
    and Airflow's API security module there would cost each task seconds."""

    def __get__(self, instance, owner):
        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "training-sdk"}]


class TrainingSdkApiPlugin(AirflowPlugin):
    name = "training_sdk_api"
    fastapi_apps = _FastAPIApps()

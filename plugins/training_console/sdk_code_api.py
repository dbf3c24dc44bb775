"""The SDK's code-staging routes, mounted at /training-sdk by plugins/training_sdk_api.py (whose docstring says what
each route does and who may call it): PUT, GET and DELETE of the caller's staged code archives.

Here, not in the plugin's module, because this module imports FastAPI and Airflow's API security at its top: every
task process loads the plugins, and only the API server builds the app (the plugin imports this module when its
fastapi_apps are read). It sits with the training-jobs view's package because that is where the plugins' web code
lives (its cross-site guard and docs-behind-login are shared), a package Airflow does not load as a plugin itself.

Who may do what is declared on each route: PUT needs the right to trigger the DAG it names (requires_access_dag);
GET and DELETE need a logged-in user and act on the caller's own directory, named from the caller's identity, never
from the request. Every route passes the app's cross-site guard first (training_console/web_boundary.py).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations (Request, Depends) at runtime.

import asyncio
import hashlib
import os
import re
import tempfile
from datetime import datetime, timezone
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from sqlalchemy import select

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.models.dag import DagModel
from airflow.utils.session import create_session
from operators.settings import sdk_code_expiry_days, sdk_code_max_bytes, sdk_code_quota_bytes, training_settings
from operators.staging.sdk_uploads import expire, quota_lock, staged_archives, used_bytes
from operators.state.retention import kept_archives
from training_console.docs_behind_login import add_docs_behind_login
from training_console.web_boundary import refuse_cross_site
from training_sdk_api import URL_PREFIX  # where the plugin mounts the app (named in the answers' hints)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# While an upload streams, the user's directory is checked every QUOTA_CHECK_BYTES written (see upload_code).
QUOTA_CHECK_BYTES = 1024 * 1024


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


# ---- dependencies ------------------------------------------------------------------------------------------------
def archive_name(name: str) -> str:
    """The path's archive name, `<sha256>.tar.gz` (400 otherwise)."""
    if not name.endswith(".tar.gz") or not _SHA256.match(name.removesuffix(".tar.gz")):
        raise HTTPException(400, f"name the archive <sha256 of the archive>.tar.gz (64 lowercase hex digits), "
                                 f"not {name[:100]!r}")
    return name


def dag_exists(dag_id: str) -> bool:
    """A DAG the dag-processor knows and has not marked stale (the right to trigger it is checked by the route)."""
    with create_session() as session:
        stale = session.scalar(select(DagModel.is_stale).where(DagModel.dag_id == dag_id))
    return stale is False


def existing_dag(dag_id: str) -> str:
    """The query's dag_id, a DAG that exists (404 otherwise)."""
    if not dag_exists(dag_id):
        raise HTTPException(404, f"DAG {dag_id!r} does not exist; upload code for the DAG you will trigger "
                                 "(dag_id=...)")
    return dag_id


ArchiveName = Annotated[str, Depends(archive_name)]
ExistingDag = Annotated[str, Depends(existing_dag)]
MAY_TRIGGER_THE_DAG = Depends(requires_access_dag("POST", DagAccessEntity.RUN))

router = APIRouter()


# ---- the routes (the caller's identity first: an anonymous request is refused before its input is judged) --------
@router.put("/code/{name}", dependencies=[MAY_TRIGGER_THE_DAG])
async def upload_code(user: GetUserDep, name: ArchiveName, dag_id: ExistingDag, request: Request):
    sha = name.removesuffix(".tar.gz")
    limit = sdk_code_max_bytes()
    declared = request.headers.get("content-length")
    if declared and int(declared) > limit:
        raise HTTPException(413, f"code archive of {int(declared)} bytes is over the {limit}-byte limit "
                                 f"([training] sdk_code_max_bytes); leave data out of source_dir")
    settings = training_settings()
    staging = settings.user_code_dir(user.get_name())
    os.makedirs(staging, exist_ok=True)
    expire(staging, sdk_code_expiry_days(), kept=kept_archives(settings.workspace))  # one small directory
    final = os.path.join(staging, name)
    quota = sdk_code_quota_bytes()

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
    return {"source_dir": final, "bytes": size, "sha256": sha, "default_output_path": settings.models_dir}


# GET and DELETE: a logged-in user, acting on their own directory only (named from the caller's identity, never
# from the request). No Airflow resource fits staged code, and none is needed: nobody reaches another user's
# archives here, and what one's own archives may run as is checked where they are used (the PUT's right to
# trigger the DAG, the first task's check of the triggering user).
@router.get("/code")
def list_code(user: GetUserDep) -> dict:
    settings = training_settings()
    staging = settings.user_code_dir(user.get_name())
    expiry_days = sdk_code_expiry_days()
    expired = expire(staging, expiry_days, kept=kept_archives(settings.workspace))  # a model's code stays
    archives = [{"name": a.name, "sha256": a.name.removesuffix(".tar.gz"), "bytes": a.bytes,
                 "uploaded_at": _iso(a.mtime), "source_dir": a.path,
                 "expires_at": _iso(a.mtime + expiry_days * 86400) if expiry_days > 0 else None}
                for a in staged_archives(staging)]
    return {"archives": archives, "used_bytes": used_bytes(staging), "quota_bytes": sdk_code_quota_bytes(),
            "expiry_days": expiry_days, "expired": expired}


@router.delete("/code/{name}")
def delete_code(user: GetUserDep, name: ArchiveName) -> dict:
    path = os.path.join(training_settings().user_code_dir(user.get_name()), name)
    try:
        size = os.stat(path, follow_symlinks=False).st_size
        os.unlink(path)
    except FileNotFoundError:
        raise HTTPException(404, f"you have no staged code named {name}; GET {URL_PREFIX}/code lists yours "
                                 "(another user's code is never yours to delete)") from None
    return {"deleted": name, "bytes": size}


def create_app() -> FastAPI:
    """A new app of the routes behind the cross-site guard, its docs for logged-in users only."""
    app = FastAPI(title="training-sdk", description="Code upload for the training_sdk client", openapi_url=None,
                  docs_url=None, redoc_url=None, dependencies=[Depends(refuse_cross_site)])
    add_docs_behind_login(app)
    app.include_router(router)
    return app

"""The SDK's endpoints on the Airflow API server (a FastAPI app mounted at /training-sdk), for what the REST API lacks:

  PUT /training-sdk/code/<sha256>.tar.gz?dag_id=D   a packed source_dir (the request body) into the caller's own part of
                                                    the workspace's staging area,
                                                    `<workspace>/staging/code/<user>/<sha256>.tar.gz`; answers the path
                                                    to use as the job's source_dir. Code, not data: bodies larger than
                                                    [training] sdk_code_max_bytes (default 64 MiB) are refused (413),
                                                    and so is an upload that would take the caller's staged code over
                                                    [training] sdk_code_quota_bytes (default 512 MiB).
                                                    Content-addressed: the same code is stored once per user; the body
                                                    must hash to the name (a truncated upload never becomes a
                                                    source_dir).

It needs the caller's API token (the same bearer token as the REST API), an existing DAG D and the right to trigger it.
The first task accepts a staged source_dir only from the user who triggered the run (operators/staging/sdk_uploads.py).
/openapi.json and /docs need a logged-in user too. (Job metrics come from the training-jobs view's API,
plugins/training_console.)
"""

import functools
import hashlib
import os
import re
import tempfile

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/training-sdk"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations (Request) at runtime.


def _max_bytes() -> int:
    from operators.settings import sdk_code_max_bytes  # [training] is read in one place

    return sdk_code_max_bytes()


def _quota_bytes() -> int:
    from operators.settings import sdk_code_quota_bytes

    return sdk_code_quota_bytes()


@functools.cache
def create_app():
    from fastapi import Depends, FastAPI, HTTPException, Request

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag

    from training_console.docs_behind_login import add_docs_behind_login

    app = FastAPI(title="training-sdk", description="Code upload for the training_sdk client", openapi_url=None,
                  docs_url=None, redoc_url=None)
    add_docs_behind_login(app)

    @app.put("/code/{name}", dependencies=[Depends(requires_access_dag("POST", DagAccessEntity.RUN))])
    async def upload_code(name: str, request: Request, dag_id: str, user: GetUserDep):
        from operators.staging.sdk_uploads import used_bytes
        from operators.settings import training_settings

        sha = name.removesuffix(".tar.gz")
        if not name.endswith(".tar.gz") or not _SHA256.match(sha):
            raise HTTPException(400, "name the upload <sha256 of the archive>.tar.gz")
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
        final = os.path.join(staging, name)
        quota = _quota_bytes()
        kept = used_bytes(staging, besides=final)
        over_quota = (f"your staged code would pass your quota of {quota} bytes ([training] sdk_code_quota_bytes; "
                      f"{kept} bytes kept); ask an admin to clear your old uploads or raise the quota")
        if declared and kept + int(declared) > quota:
            raise HTTPException(413, over_quota)
        digest, size = hashlib.sha256(), 0
        fd, partial = tempfile.mkstemp(prefix=f".{sha[:12]}.", suffix=".partial", dir=staging)
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise HTTPException(413, f"code archive is over the {limit}-byte limit "
                                                 f"([training] sdk_code_max_bytes); leave data out of source_dir")
                    if kept + size > quota:
                        raise HTTPException(413, over_quota)
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != sha:
                raise HTTPException(400, f"the upload hashes to {digest.hexdigest()}, not {sha}: it was truncated "
                                         f"or altered; upload again")
            os.chmod(partial, 0o644)
            os.replace(partial, final)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        return {"source_dir": final, "bytes": size, "sha256": sha,
                "default_output_path": settings.models_dir}

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

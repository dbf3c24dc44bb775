"""The API server's check of the secrets a new run's conf references (issue 24): a root middleware, registered by
plugins/training_jobs_plugin.py, in front of the routes that create runs with a conf:

    POST /api/v2/dags/{dag_id}/dagRuns          (REST API, SDK, and the UI's trigger form, which uses this route)
    POST /api/v2/backfills                      (dag_run_conf: one conf for every run of the backfill)
    POST /api/v2/assets/{asset_id}/materialize  (a run of the one DAG that produces the asset, e.g. training_job's
                                                 model asset, with the body's conf)

For each connection, Variable and Kubernetes Secret the conf names (operators/jobspec/secret_policy.py finds them), in order:
the admin's [training] secret_references must allow it for the DAG; the triggering user must be allowed to read the
connection / Variable through Airflow's auth manager (the same question GET /api/v2/connections/{id} asks); and with
[core] multi_team, a connection / Variable that belongs to a team must belong to the DAG's team (the run's task reads
it through the execution API, which scopes it that way too). A refused reference answers 403 with one line naming the
field and the reference, and no run is created.

Why here and not only in the first task: only the API server knows who the user is and can ask the auth manager (a
task has no metadata DB and no auth manager); the first task still applies the admin's policy to every run, whoever or
whatever created it (operators/stages/validate_spec.py). A request that Airflow itself will refuse (not
authenticated, not allowed to trigger the DAG, not JSON) passes through untouched: Airflow answers it, and nothing
about the references is disclosed.
"""

from __future__ import annotations

import json
import re
from typing import Any

# `path` is the full request path; the API may live under a prefix ([api] base_url), so only the end is matched.
_TRIGGER = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
_BACKFILL = re.compile(r"/api/v2/backfills/?$")
_MATERIALIZE = re.compile(r"/api/v2/assets/(?P<asset_id>[^/]+)/materialize/?$")


def _created_runs(scope: dict) -> tuple[str, str, str] | None:
    """(how the DAG is named: "path" / "body" / "asset", the path's dag_id or asset_id, the body's conf key) for a
    request that creates runs with a conf, else None."""
    if scope.get("type") != "http" or scope.get("method") != "POST":
        return None
    path = scope.get("path", "")
    if match := _TRIGGER.search(path):
        return "path", match.group("dag_id"), "conf"
    if _BACKFILL.search(path):
        return "body", "", "dag_run_conf"
    if match := _MATERIALIZE.search(path):
        return "asset", match.group("asset_id"), "conf"
    return None


def _asset_dag(asset_id: str) -> str | None:
    """The one DAG that materializes the asset (what the route runs); None when none or several (Airflow refuses)."""
    # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
    from pydantic import TypeAdapter, ValidationError
    from sqlalchemy import select

    from airflow.models.asset import TaskOutletAssetReference
    from airflow.utils.session import create_session

    try:
        number = TypeAdapter(int).validate_python(asset_id)  # parsed as the route parses its path ("1.0" is 1)
    except ValidationError:
        return None  # the route answers 422
    with create_session() as session:
        dags = session.scalars(select(TaskOutletAssetReference.dag_id).where(
            TaskOutletAssetReference.asset_id == number).group_by(TaskOutletAssetReference.dag_id).limit(2)).all()
    return dags[0] if len(dags) == 1 else None


async def _read_body(receive) -> tuple[bytes, Any]:
    """The whole request body, and a `receive` that hands it on to the app as if unread."""
    chunks, more, last = [], True, None
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: let the app see that
            last = message
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body, replayed = b"".join(chunks), False

    async def replay():
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False} if last is None else last
        return await receive()

    return body, replay


async def request_user(scope: dict) -> Any | None:
    """The request's user, resolved exactly as Airflow's routes resolve it (bearer token, else the session cookie);
    None when it is not authenticated (Airflow then answers 401 itself)."""
    # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
    from fastapi import HTTPException, Request
    from fastapi.security import HTTPAuthorizationCredentials

    from airflow.api_fastapi.core_api.security import get_user

    request = Request(scope)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip()) if token.strip() else None
    try:
        return await get_user(request, None, credentials)
    except HTTPException:
        return None


def _team(model: Any, name: str, multi_team: bool) -> str | None:
    return model.get_team_name(name) if multi_team else None


def refusal(user: Any, dag_id: str | None, refs: list, asset_id: str | None = None) -> tuple[int, str] | None:
    """(status, one line) for the first reference this user may not make in a run of `dag_id` (or of the DAG that
    materializes `asset_id`), or None."""
    # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        ConnectionDetails,
        DagAccessEntity,
        DagDetails,
        VariableDetails,
    )
    from airflow.configuration import conf
    from airflow.models import Connection, DagModel, Variable

    from operators.jobspec.secret_policy import CONNECTIONS, VARIABLES, load_policy

    if asset_id is not None:
        dag_id = _asset_dag(asset_id)
    if not dag_id:
        return None
    auth = get_auth_manager()
    multi_team = conf.getboolean("core", "multi_team", fallback=False)
    dag_team = _team(DagModel, dag_id, multi_team)
    if not auth.is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN,
                                  details=DagDetails(id=dag_id, team_name=dag_team), user=user):
        return None  # Airflow refuses the trigger itself
    try:
        policy = load_policy()
    except ValueError as err:
        return 500, str(err)
    for ref in refs:
        reason = policy.refusal(dag_id, ref)
        if reason:
            return 403, f"{ref.field}: {reason}"
        if ref.kind == CONNECTIONS:
            team = _team(Connection, ref.name, multi_team)
            allowed = auth.is_authorized_connection(method="GET", user=user,
                                                    details=ConnectionDetails(conn_id=ref.name, team_name=team))
        elif ref.kind == VARIABLES:
            team = _team(Variable, ref.name, multi_team)
            allowed = auth.is_authorized_variable(method="GET", user=user,
                                                  details=VariableDetails(key=ref.name, team_name=team))
        else:
            continue  # a Kubernetes Secret is no Airflow resource: the admin's policy alone decides
        if not allowed:
            return 403, (f"{ref.field}: user {user.get_name()!r} may not read {ref.label}; ask an Airflow admin for "
                         "read access to it, or remove the reference")
        if team is not None and team != dag_team:
            return 403, (f"{ref.field}: {ref.label} belongs to team {team!r}, and runs of DAG {dag_id!r} (team "
                         f"{dag_team!r}) reach only their own team's; use one of that team's, or remove the reference")
    return None


class SecretReferenceCheck:
    """Pure ASGI middleware (no BaseHTTPMiddleware: the body it reads must reach the route unchanged)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        target = _created_runs(scope)
        if target is None:
            await self.app(scope, receive, send)
            return
        body, receive = await _read_body(receive)
        answer = await self._check(scope, body, *target)
        if answer is None:
            await self.app(scope, receive, send)
            return
        # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
        from starlette.responses import JSONResponse

        status, line = answer
        await JSONResponse({"detail": line}, status_code=status)(scope, receive, send)

    async def _check(self, scope: dict, body: bytes, named: str, value: str, conf_key: str) -> tuple[int, str] | None:
        # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
        from starlette.concurrency import run_in_threadpool

        from operators.jobspec.secret_policy import references

        try:
            payload = json.loads(body)
        except ValueError:
            return None  # Airflow answers 422
        if not isinstance(payload, dict):
            return None
        dag_id = {"path": value, "body": payload.get("dag_id"), "asset": ""}[named]
        conf = payload.get(conf_key)
        if not isinstance(dag_id, str) or not isinstance(conf, dict):
            return None
        refs = references(conf)
        if not refs:
            return None
        user = await request_user(scope)
        if user is None:
            return None
        asset_id = value if named == "asset" else None
        # the auth manager and the metadata DB are synchronous: off the event loop
        return await run_in_threadpool(refusal, user, dag_id, refs, asset_id)

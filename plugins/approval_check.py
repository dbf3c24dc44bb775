"""The API server's four-eyes check of a retraining run's approval (issue 47): a root middleware, registered by
plugins/training_jobs_plugin.py, in front of the one route that answers a human-in-the-loop task,

    PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails

(the UI's Required actions answer through it too), and in front of the routes that write a task's XComs,

    POST /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries
    PATCH, DELETE .../xcomEntries/{key}

since the approval task's XCom `decision` is what promote_model reads: a user who may not answer may not write it
either (marking the waiting task success then leaves promote_model without a decision: it fails, nothing is promoted).
For a task of the retraining template's PromotionApprovalOperator (operators/pipelines/approval.py), in order:

- the user who triggered the run (DagRun.triggering_user_name) is refused, whatever the config's `approvers` say;
- when the config names approvers, only they (the task's assigned users: Airflow checks them for an answer too);
- else the user must hold the role [training] approver_role (default `op`): with the simple auth manager that role or
  a higher one (`op`: Op and Admin users), with an auth manager whose users carry `roles` (FAB), one of those by name.
  An auth manager whose users carry neither cannot tell: refused, with a line that says to name approvers.

A refusal answers 403 with one line and the answer is not recorded. Why here: only the API server knows who answers
and can ask the auth manager; Airflow's own check (`is_authorized_hitl_task`) runs only for assigned users and knows
nothing of who triggered the run. A request Airflow refuses itself (not authenticated, no right to answer for the DAG,
no such task) passes through untouched.
"""

from __future__ import annotations

import re
from typing import Any

# `path` is the full request path; the API may live under a prefix ([api] base_url), so only the end is matched.
_TASK = r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/taskInstances/(?P<task_id>[^/]+)/"
_ANSWER = re.compile(_TASK + r"(?P<map_index>-?[0-9]+)/hitlDetails/?$")
_XCOM = re.compile(_TASK + r"xcomEntries(?:/.*)?$")
XCOM_WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
APPROVAL_OPERATOR = "PromotionApprovalOperator"  # operators/pipelines/approval.py's class: the task's `operator`


def decided_task(scope: dict) -> tuple[str, str, str, int] | None:
    """(dag_id, run_id, task_id, map_index) of a request that answers a human-in-the-loop task or writes a task's
    XComs, else None (an approval task is never mapped: its XComs are map index -1's)."""
    if scope.get("type") != "http":
        return None
    method, path = scope.get("method"), scope.get("path", "")
    if method == "PATCH" and (match := _ANSWER.search(path)):
        return match["dag_id"], match["run_id"], match["task_id"], int(match["map_index"])
    if method in XCOM_WRITES and (match := _XCOM.search(path)):
        return match["dag_id"], match["run_id"], match["task_id"], -1
    return None


def holds_role(user: Any, role: str) -> bool | None:
    """Whether the auth manager gives `user` the role `role`; None when its users say nothing of roles."""
    roles = getattr(user, "roles", None)
    if roles is not None:  # FAB and the like: several roles, by name
        return role.lower() in {str(getattr(r, "name", r)).lower() for r in roles}
    if not hasattr(user, "role"):
        return None
    # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
    # The simple auth manager: one role per user, each holding the rights of the ones below it (Admin has Op's).
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManagerRole

    ranks = {r.name.lower(): r.order for r in SimpleAuthManagerRole}
    own = (user.role or "").lower()
    if role.lower() not in ranks:
        return own == role.lower()
    return own in ranks and ranks[own] >= ranks[role.lower()]


def refusal(user: Any, triggered_by: str | None, assignees: list | None, role: str) -> str | None:
    """One line when `user` may not answer the approval of a run `triggered_by` started, else None (see the
    module's docstring)."""
    # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
    from operators.pipelines.approval import self_approval_refusal

    name = user.get_name()
    refused = self_approval_refusal(name, triggered_by)
    if refused:
        return refused
    if assignees:  # the config's approvers (Airflow checks them too, for an answer; not for an XCom write)
        if str(user.get_id()) in {str(a.get("id")) for a in assignees}:
            return None
        names = ", ".join(str(a.get("name") or a.get("id")) for a in assignees)
        return f"refused: {name} is not among the approvers the retraining config names ({names})"
    held = holds_role(user, role)
    if held is None:
        return (f"refused: the auth manager says nothing of {name}'s roles, so [training] approver_role ({role}) "
                "cannot be checked; name the approvers in the retraining config (approval.approvers)")
    if not held:
        return (f"refused: {name} does not hold the role {role!r} that answers approvals ([training] "
                "approver_role); ask a user with that role, or an admin for it")
    return None


def _lookup(dag_id: str, run_id: str, task_id: str, map_index: int) -> tuple[str | None, list | None] | None:
    """(triggering user, assigned users) of the run's task when it is a PromotionApprovalOperator, else None."""
    # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
    from sqlalchemy import select

    from airflow.models import DagRun, TaskInstance
    from airflow.models.hitl import HITLDetail
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.execute(
            select(TaskInstance.operator, DagRun.triggering_user_name, HITLDetail.assignees)
            .join(DagRun, (DagRun.dag_id == TaskInstance.dag_id) & (DagRun.run_id == TaskInstance.run_id))
            .outerjoin(HITLDetail, HITLDetail.ti_id == TaskInstance.id)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id,
                   TaskInstance.map_index == map_index)
        ).first()
    if row is None or row.operator != APPROVAL_OPERATOR:
        return None
    return row.triggering_user_name, row.assignees


def check(user: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> str | None:
    """The refusal of this answer, or None (also when Airflow refuses it itself: no right to answer for the DAG)."""
    # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.configuration import conf
    from airflow.models import DagModel

    from operators.settings import approver_role

    team = DagModel.get_team_name(dag_id) if conf.getboolean("core", "multi_team", fallback=False) else None
    if not get_auth_manager().is_authorized_dag(method="PUT", access_entity=DagAccessEntity.HITL_DETAIL,
                                                details=DagDetails(id=dag_id, team_name=team), user=user):
        return None
    found = _lookup(dag_id, run_id, task_id, map_index)
    if found is None:
        return None
    return refusal(user, *found, approver_role())


class ApprovalCheck:
    """Pure ASGI middleware: the answer's body reaches Airflow's route unread."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        target = decided_task(scope)
        line = await self._check(scope, target) if target else None
        if line is None:
            await self.app(scope, receive, send)
            return
        # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
        from starlette.responses import JSONResponse

        await JSONResponse({"detail": line}, status_code=403)(scope, receive, send)

    async def _check(self, scope: dict, target: tuple[str, str, str, int]) -> str | None:
        # lazy: API-server code, only when the API server runs it (every Airflow process loads the plugins)
        from starlette.concurrency import run_in_threadpool

        from secret_reference_check import request_user

        user = await request_user(scope)
        if user is None:
            return None  # Airflow answers 401
        # the auth manager and the metadata DB are synchronous: off the event loop
        return await run_in_threadpool(check, user, *target)

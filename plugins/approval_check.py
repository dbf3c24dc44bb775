"""The API server's four-eyes check of a retraining run's approval (issue 47): a root middleware, registered by
plugins/training_jobs_plugin.py, in front of the one route that answers a human-in-the-loop task,

    PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails

(the UI's Required actions answer through it too). For a task of the retraining template's PromotionApprovalOperator
(operators/pipelines/approval.py), in order:

- the user who triggered the run (DagRun.triggering_user_name) is refused, whatever the config's `approvers` say;
- when the config names approvers, Airflow itself lets only them answer (the task's assigned users), so nothing more
  is checked here;
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
_ANSWER = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/taskInstances/(?P<task_id>[^/]+)/"
                     r"(?P<map_index>-?[0-9]+)/hitlDetails/?$")
APPROVAL_OPERATOR = "PromotionApprovalOperator"  # operators/pipelines/approval.py's class: the task's `operator`


def answered_task(scope: dict) -> tuple[str, str, str, int] | None:
    """(dag_id, run_id, task_id, map_index) of a request that answers a human-in-the-loop task, else None."""
    if scope.get("type") != "http" or scope.get("method") != "PATCH":
        return None
    match = _ANSWER.search(scope.get("path", ""))
    if match is None:
        return None
    return match["dag_id"], match["run_id"], match["task_id"], int(match["map_index"])


def holds_role(user: Any, role: str) -> bool | None:
    """Whether the auth manager gives `user` the role `role`; None when its users say nothing of roles."""
    roles = getattr(user, "roles", None)
    if roles is not None:  # FAB and the like: several roles, by name
        return role.lower() in {str(getattr(r, "name", r)).lower() for r in roles}
    if not hasattr(user, "role"):
        return None
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
    from operators.pipelines.approval import self_approval_refusal

    name = user.get_name()
    refused = self_approval_refusal(name, triggered_by)
    if refused:
        return refused
    if assignees:  # the config's approvers: Airflow answers 403 to anyone else
        return None
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
        target = answered_task(scope)
        line = await self._check(scope, target) if target else None
        if line is None:
            await self.app(scope, receive, send)
            return
        from starlette.responses import JSONResponse

        await JSONResponse({"detail": line}, status_code=403)(scope, receive, send)

    async def _check(self, scope: dict, target: tuple[str, str, str, int]) -> str | None:
        from starlette.concurrency import run_in_threadpool

        from secret_reference_check import request_user

        user = await request_user(scope)
        if user is None:
            return None  # Airflow answers 401
        # the auth manager and the metadata DB are synchronous: off the event loop
        return await run_in_threadpool(check, user, *target)

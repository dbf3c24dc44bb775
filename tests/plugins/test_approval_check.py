"""The API server's four-eyes check of a retraining approval (plugins/approval_check.py): the route it guards, who may
answer, and the 403 it answers in Airflow's place. The served Airflow (alice triggers, alice is refused, olivia
approves): tests/integration/test_retraining_approval.py."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

import approval_check as check

ALICE, BOB = SimpleAuthManagerUser(username="alice", role="user"), SimpleAuthManagerUser(username="bob", role="user")
OLIVIA, ADMIN = SimpleAuthManagerUser(username="olivia", role="op"), SimpleAuthManagerUser(username="admin",
                                                                                           role="admin")
ANSWER = "/api/v2/dags/retrain_churn/dagRuns/manual__2026-12-01T21:00:00+00:00/taskInstances/approve_promotion/-1/" \
         "hitlDetails"


XCOMS = "/api/v2/dags/retrain_churn/dagRuns/r1/taskInstances/approve_promotion/xcomEntries"


@pytest.mark.parametrize("method, path, expected", [
    ("PATCH", ANSWER, ("retrain_churn", "manual__2026-12-01T21:00:00+00:00", "approve_promotion", -1)),
    # the decision promote_model reads: whoever may not answer may not write it
    ("POST", XCOMS, ("retrain_churn", "r1", "approve_promotion", -1)),
    ("PATCH", XCOMS + "/decision", ("retrain_churn", "r1", "approve_promotion", -1)),
    ("DELETE", XCOMS + "/decision", ("retrain_churn", "r1", "approve_promotion", -1)),
    ("GET", XCOMS + "/decision", None),
    ("PATCH", "/airflow" + ANSWER.replace("/-1/", "/3/"), ("retrain_churn", "manual__2026-12-01T21:00:00+00:00",
                                                          "approve_promotion", 3)),  # behind a path prefix
    ("GET", ANSWER, None),
    ("PATCH", ANSWER.replace("/hitlDetails", "/hitlDetails/tries/1"), None),
    ("PATCH", "/api/v2/dags/retrain_churn/dagRuns/r/taskInstances/approve_promotion", None),
])
def test_the_routes_that_answer_an_approval_or_write_its_decision_are_checked(method, path, expected):
    assert check.decided_task({"type": "http", "method": method, "path": path}) == expected


def test_the_triggering_user_never_answers_whatever_the_approvers_say():
    line = check.refusal(ALICE, "alice", None, "op")
    assert line == ("refused: alice triggered this run and cannot answer the approval of its own promotion; another "
                    "person approves it (the config's approval.approvers, else a user with the role [training] "
                    "approver_role)")
    assert check.refusal(ALICE, "alice", [{"id": "alice", "name": "alice"}], "user") == line  # listed, or in the role
    assert check.refusal(OLIVIA, "olivia", None, "op").startswith("refused: olivia triggered this run")
    assert check.refusal(ADMIN, "admin", None, "op").startswith("refused: admin triggered")  # an admin's own run too


def test_by_default_the_admins_role_answers():
    assert check.refusal(OLIVIA, "alice", None, "op") is None
    assert check.refusal(ADMIN, "alice", None, "op") is None  # Admin holds Op's rights (the simple auth manager)
    assert check.refusal(OLIVIA, None, None, "op") is None  # a scheduled run: nobody triggered it
    assert check.refusal(BOB, "alice", None, "op") == (
        "refused: bob does not hold the role 'op' that answers approvals ([training] approver_role); ask a user with "
        "that role, or an admin for it")
    assert check.refusal(OLIVIA, "alice", None, "admin").startswith("refused: olivia does not hold the role 'admin'")
    assert check.refusal(BOB, "alice", None, "user") is None  # the admin may name a lower role
    # the config's approvers (the task's assigned users): only they, whatever their role
    assert check.refusal(BOB, "alice", [{"id": "bob", "name": "bob"}], "op") is None
    assert check.refusal(OLIVIA, "alice", [{"id": "bob", "name": "bob"}, {"id": "omar", "name": "omar"}], "op") == (
        "refused: olivia is not among the approvers the retraining config names (bob, omar)")


def test_roles_of_other_auth_managers():
    fab_user = SimpleNamespace(get_name=lambda: "omar", roles=[SimpleNamespace(name="Approver"),
                                                               SimpleNamespace(name="Viewer")])
    assert check.holds_role(fab_user, "approver") is True and check.holds_role(fab_user, "Op") is False
    assert check.holds_role(SimpleAuthManagerUser(username="x", role=None), "op") is False
    assert check.holds_role(SimpleAuthManagerUser(username="x", role="op"), "approvers") is False  # no such role
    opaque = SimpleNamespace(get_name=lambda: "kim")  # an auth manager whose users carry no roles
    assert check.holds_role(opaque, "op") is None
    assert check.refusal(opaque, "alice", None, "op") == (
        "refused: the auth manager says nothing of kim's roles, so [training] approver_role (op) cannot be checked; "
        "name the approvers in the retraining config (approval.approvers)")


def test_only_the_approval_task_of_the_retraining_template_is_checked():
    from operators.pipelines.approval import PromotionApprovalOperator

    assert check.APPROVAL_OPERATOR == PromotionApprovalOperator.__name__  # the task instance's `operator` column


def _call(scope: dict) -> tuple[list, list]:
    reached, sent = [], []

    async def route(scope, receive, send):
        reached.append(scope["path"])

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b'{"chosen_options": ["Approve"]}', "more_body": False}

    asyncio.run(check.ApprovalCheck(route)(scope, receive, send))
    return reached, sent


def test_a_refused_answer_is_a_403_with_the_line_and_never_reaches_airflow(monkeypatch):
    asked = []
    monkeypatch.setattr("secret_reference_check.request_user", lambda scope: _resolved(ALICE))
    monkeypatch.setattr(check, "check", lambda user, *target: asked.append((user.get_name(), *target))
                        or check.refusal(user, "alice", None, "op"))
    scope = {"type": "http", "method": "PATCH", "path": ANSWER, "headers": []}
    reached, sent = _call(scope)
    assert reached == [] and sent[0]["status"] == 403
    assert json.loads(sent[1]["body"])["detail"].startswith("refused: alice triggered this run")
    assert asked == [("alice", "retrain_churn", "manual__2026-12-01T21:00:00+00:00", "approve_promotion", -1)]

    monkeypatch.setattr("secret_reference_check.request_user", lambda scope: _resolved(OLIVIA))
    assert _call(scope) == ([ANSWER], [])  # olivia's answer reaches Airflow's route
    monkeypatch.setattr("secret_reference_check.request_user", lambda scope: _resolved(None))
    assert _call(scope) == ([ANSWER], [])  # not logged in: Airflow answers 401
    assert _call({**scope, "method": "GET"}) == ([ANSWER], [])


async def _resolved(value):
    return value

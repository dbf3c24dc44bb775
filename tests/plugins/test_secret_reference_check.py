"""The API server's check of a new run's secret references (plugins/secret_reference_check.py), the parts the served
Airflow in tests/integration/test_secret_references.py does not reach: [core] multi_team (a connection or Variable of
another team than the DAG's is refused), the routes it guards, and a body that reaches the route unchanged."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

import secret_reference_check as check
from operators.jobspec.secret_policy import references

CONF = {"environment": {"P": {"connection": "prod_db", "field": "password"}, "V": {"variable": "ops_api_key"}}}


class AllowingAuthManager:
    """Says yes to everything and records the details it was asked about."""

    def __init__(self):
        self.asked = []

    def is_authorized_dag(self, **kwargs):
        return True

    def is_authorized_connection(self, *, details, **kwargs):
        self.asked.append(("connection", details.conn_id, details.team_name))
        return True

    def is_authorized_variable(self, *, details, **kwargs):
        self.asked.append(("variable", details.key, details.team_name))
        return True


@pytest.fixture
def teams(monkeypatch):
    """multi_team on; the DAG belongs to team ml; .owners (resource name -> team) is for the test to fill."""
    from airflow.models import Connection, DagModel, Variable

    owners: dict[str, str | None] = {}
    auth = AllowingAuthManager()
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES",
                       json.dumps({"training_job": {"connections": ["*"], "variables": ["*"]}}))
    monkeypatch.setattr("airflow.api_fastapi.app.get_auth_manager", lambda: auth)
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id: "ml"))
    monkeypatch.setattr(Connection, "get_team_name", staticmethod(lambda name: owners.get(name)))
    monkeypatch.setattr(Variable, "get_team_name", staticmethod(lambda name: owners.get(name)))
    return SimpleNamespace(owners=owners, auth=auth)


def test_with_multi_team_a_run_reaches_only_its_dags_teams_and_global_secrets(teams):
    user = SimpleNamespace(get_name=lambda: "oscar")
    teams.owners.update(prod_db="ml", ops_api_key=None)  # the DAG's team's connection, a global Variable
    assert check.refusal(user, "training_job", references(CONF)) is None
    # the auth manager was asked with each resource's team, as Airflow's own routes ask it
    assert teams.auth.asked == [("connection", "prod_db", "ml"), ("variable", "ops_api_key", None)]
    teams.owners["ops_api_key"] = "finance"
    status, line = check.refusal(user, "training_job", references(CONF))
    assert status == 403 and line == (
        "environment.V: Airflow Variable 'ops_api_key' belongs to team 'finance', and runs of DAG 'training_job' "
        "(team 'ml') reach only their own team's; use one of that team's, or remove the reference")


@pytest.mark.parametrize("method, path, expected", [
    ("POST", "/api/v2/dags/training_job/dagRuns", ("path", "training_job", "conf")),
    ("POST", "/airflow/api/v2/dags/training_job/dagRuns/", ("path", "training_job", "conf")),
    ("POST", "/api/v2/backfills", ("body", "", "dag_run_conf")),
    ("POST", "/api/v2/assets/7/materialize", ("asset", "7", "conf")),
    ("POST", "/api/v2/backfills/dry_run", None),  # creates nothing
    ("GET", "/api/v2/dags/training_job/dagRuns", None),
    ("POST", "/api/v2/dags/training_job/dagRuns/list", None),
])
def test_the_routes_that_create_runs_with_a_conf_are_the_ones_checked(method, path, expected):
    assert check._created_runs({"type": "http", "method": method, "path": path}) == expected


def test_the_route_receives_the_body_it_was_sent(monkeypatch):
    body = json.dumps({"conf": CONF, "logical_date": None}).encode()
    seen = {}

    async def route(scope, receive, send):
        message = await receive()
        seen["body"], seen["more"] = message["body"], message["more_body"]

    async def checked(*args):
        return None  # allowed

    chunks = [{"type": "http.request", "body": body[:10], "more_body": True},
              {"type": "http.request", "body": body[10:], "more_body": False}]

    async def receive():
        return chunks.pop(0)

    monkeypatch.setattr(check.SecretReferenceCheck, "_check", lambda self, *args: checked(*args))
    scope = {"type": "http", "method": "POST", "path": "/api/v2/dags/training_job/dagRuns", "headers": []}
    asyncio.run(check.SecretReferenceCheck(route)(scope, receive, None))
    assert seen == {"body": body, "more": False}

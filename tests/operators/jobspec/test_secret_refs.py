"""Secrets by reference read from Airflow (environment-variable backend: AIRFLOW_VAR_*, AIRFLOW_CONN_*)."""

from __future__ import annotations

import json

import pytest

from operators.launch.base import LaunchRequest
from operators.jobspec.secret_refs import resolve_references
from operators.launch.spec import validate_spec
from operators.jobspec.errors import SpecError

BASE = {"job_name": "j", "source_dir": "s3://b/c/", "output_path": "s3://b/o", "entry_point": "t.py"}


def refs(environment: dict) -> dict:
    return validate_spec({**BASE, "environment": environment}).secret_references()


def test_variables_and_connection_fields_are_read(monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_WANDB_KEY", "v-123")
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps(
        {"conn_type": "postgres", "host": "db", "login": "me", "password": "p@ss", "port": 5432,
         "extra": {"sslmode": "require", "opts": {"a": 1}}}))
    values = resolve_references(refs({
        "A": {"variable": "wandb_key"}, "B": {"connection": "warehouse"},
        "C": {"connection": "warehouse", "field": "login"}, "D": {"connection": "warehouse", "field": "port"},
        "E": {"connection": "warehouse", "field": "extra.sslmode"},
        "F": {"connection": "warehouse", "field": "extra.opts"}, "G": {"connection": "warehouse", "field": "uri"}}))
    assert values["A"] == "v-123" and values["B"] == "p@ss" and values["C"] == "me" and values["D"] == "5432"
    assert values["E"] == "require" and json.loads(values["F"]) == {"a": 1}
    assert values["G"].startswith("postgres://me:p%40ss@db:5432")


def test_a_missing_reference_names_the_variable_not_a_value(monkeypatch):
    monkeypatch.delenv("AIRFLOW_VAR_NOPE_KEY", raising=False)
    with pytest.raises(SpecError) as err:
        resolve_references(refs({"TOKEN": {"variable": "nope_key"}}))
    assert err.value.field == "environment.TOKEN" and "Airflow Variable 'nope_key' cannot be read" in str(err.value)
    monkeypatch.setenv("AIRFLOW_CONN_NOPASS", json.dumps({"conn_type": "http", "host": "h"}))
    with pytest.raises(SpecError, match="connection 'nopass' has no password"):
        resolve_references(refs({"P": {"connection": "nopass"}}))


def test_resolved_values_never_serialize_with_the_launch_request(tmp_path):
    request = LaunchRequest(job_name="j", job_root=str(tmp_path), workspace=str(tmp_path), layout="ti",
                            instance_count=1, hosts=("algo-1",), env={"A": "1"}, secret_env={"TOKEN": "s3cr3t"})
    assert "s3cr3t" not in json.dumps(request.to_dict()) and "s3cr3t" not in repr(request)
    assert LaunchRequest.from_dict({**request.to_dict(), "secret_env": {"X": "y"}}).secret_env == {}

"""The admin's secret reference policy ([training] secret_references): which secrets a spec names, default deny, DAG
and name patterns, one-line refusals naming the field and the reference, and a malformed setting named."""

from __future__ import annotations

import json

import pytest

from operators.jobspec.secret_policy import Reference, load_policy, parse_policy, references
from operators.launch.spec import validate_spec
from operators.jobspec.errors import SpecError

BASE = {"job_name": "j", "source_dir": "s3://b/c/", "output_path": "s3://b/o", "entry_point": "t.py"}
EVERY_KIND = {
    "environment": {"P": {"connection": "prod_db", "field": "password"}, "V": {"variable": "ops_api_key"},
                    "PLAIN": "visible"},
    "connections": {"s3": "aws_default", "cos": "prod_cos"},
    "docker": {"secret_variables": {"WANDB_API_KEY": "wandb_key"}},
    "kubernetes": {"secret_env": {"HF_TOKEN": "hf-credentials/token", "DB": {"name": "db-creds", "key": "pw"}},
                   "env_from_secrets": ["train-env"]},
}
FOUND = [
    Reference("environment.P", "connections", "prod_db"),
    Reference("environment.V", "variables", "ops_api_key"),
    Reference("connections.cos", "connections", "prod_cos"),
    Reference("docker.secret_variables.WANDB_API_KEY", "variables", "wandb_key"),
    Reference("kubernetes.secret_env.HF_TOKEN", "kubernetes_secrets", "hf-credentials"),
    Reference("kubernetes.secret_env.DB", "kubernetes_secrets", "db-creds"),
    Reference("kubernetes.env_from_secrets[0]", "kubernetes_secrets", "train-env"),
]


def test_every_place_a_spec_names_a_secret_is_found_raw_and_validated():
    # the API server sees the raw conf, the first task the validated spec: both give the same references
    assert references(EVERY_KIND) == FOUND
    assert references(validate_spec({**BASE, **EVERY_KIND}).to_dict()) == FOUND


def test_the_scheme_defaults_are_the_admins_configuration_not_references():
    assert references({"connections": {"s3": "aws_default", "cos": "cos_default", "oss": " oss_default "}}) == []
    # another scheme's default is a connection the spec chose: a reference
    assert references({"connections": {"cos": "aws_default"}}) == [
        Reference("connections.cos", "connections", "aws_default")]


def test_nothing_is_allowed_by_default():
    for policy in (parse_policy({}), parse_policy(""), parse_policy(None), load_policy()):
        for ref in FOUND:
            assert not policy.allows("training_job", ref)


def test_a_refusal_is_one_line_naming_the_field_the_reference_and_the_setting():
    with pytest.raises(SpecError) as err:
        parse_policy({}).check("training_job", references(EVERY_KIND))
    message = str(err.value)
    assert err.value.field == "environment.P" and "\n" not in message
    assert message.startswith("environment.P: Airflow connection 'prod_db' may not be referenced by runs of DAG "
                              "'training_job'")
    assert "[training] secret_references" in message


def test_patterns_allow_by_dag_and_by_name():
    policy = parse_policy({
        "training_job": {"connections": ["prod_*"], "variables": ["ops_api_key"], "kubernetes_secrets": ["train-*"]},
        "*": {"variables": ["wandb_*"]},
    })
    allowed = {ref.field for ref in FOUND if policy.allows("training_job", ref)}
    assert allowed == {"environment.P", "environment.V", "connections.cos", "docker.secret_variables.WANDB_API_KEY",
                       "kubernetes.env_from_secrets[0]"}
    # another DAG gets only what "*" allows
    assert {ref.field for ref in FOUND if policy.allows("hyperparameter_search", ref)} == {
        "docker.secret_variables.WANDB_API_KEY"}
    with pytest.raises(SpecError, match=r"^kubernetes.secret_env.HF_TOKEN: Kubernetes Secret 'hf-credentials' may"):
        policy.check("training_job", FOUND)
    # case matters (Airflow ids are case-sensitive)
    assert not policy.allows("Training_Job", FOUND[0])


def test_the_setting_is_read_from_airflow_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES", json.dumps({"training_*": {"variables": ["ops_*"]}}))
    policy = load_policy()
    assert policy.allows("training_job", FOUND[1]) and not policy.allows("training_job", FOUND[0])


@pytest.mark.parametrize("raw, problem", [
    ('["prod_db"]', "must be a JSON object, got list"),
    ('{"training_job": ["prod_db"]}', "entry 'training_job' must be an object of kinds"),
    ('{"training_job": {"secrets": ["x"]}}', "unknown kind 'secrets'"),
    ('{"training_job": {"variables": "ops_*"}}', "variables must be a list of name patterns"),
    ("{not json", "must be valid JSON"),
])
def test_a_malformed_setting_is_one_line_naming_it(monkeypatch, raw, problem):
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES", raw)
    with pytest.raises(ValueError) as err:
        load_policy()
    assert "[training] secret_references" in str(err.value) and problem in str(err.value)
    assert "\n" not in str(err.value)

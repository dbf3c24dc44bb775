"""Configuration without a server: where the API URL and the credentials come from."""

from __future__ import annotations

import json

import pytest

from training_sdk import cli
from training_sdk.errors import TrainingSdkError
from training_sdk.session import DEFAULT_API_URL, Session, local_admin_password


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("TRAINING_API_URL", "TRAINING_API_TOKEN", "TRAINING_API_USERNAME", "TRAINING_API_PASSWORD",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", "AIRFLOW_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRAINING_SDK_CONFIG", str(tmp_path / "no-config.json"))
    return monkeypatch


def test_nothing_set_means_the_local_make_airflow_and_its_generated_password(clean_env, tmp_path):
    repo = tmp_path / "repo"
    (repo / "examples").mkdir(parents=True)
    (repo / "simple_auth_manager_passwords.json.generated").write_text(json.dumps({"admin": "s3cret"}))
    clean_env.chdir(repo / "examples")  # found in a parent directory (run from anywhere in the repository)
    assert Session().api_url == DEFAULT_API_URL
    assert local_admin_password() == "s3cret"


def test_environment_beats_the_config_file(clean_env, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"api_url": "http://from-file:1", "username": "alice", "password": "p"}))
    clean_env.setenv("TRAINING_SDK_CONFIG", str(config))
    assert (Session().api_url, Session().username) == ("http://from-file:1", "alice")
    clean_env.setenv("TRAINING_API_URL", "http://from-env:2/")
    assert Session().api_url == "http://from-env:2"
    assert Session(api_url="http://arg:3").api_url == "http://arg:3"


def test_no_server_is_one_clear_line(clean_env):
    session = Session(api_url="http://127.0.0.1:9", password="x")  # port 9 (discard): nothing listens
    with pytest.raises(TrainingSdkError, match=r"cannot reach the Airflow API at http://127.0.0.1:9 .*make airflow"):
        session.dag_params("training_job")


def test_cli_refuses_malformed_pairs(clean_env, capsys):
    assert cli.main(["--api-url", "http://127.0.0.1:9", "submit", "--entry-point", "t.py", "--hp", "epochs"]) == 2
    assert "--hp 'epochs': write NAME=VALUE" in capsys.readouterr().err


def test_cli_types_hyperparameters_like_json():
    assert cli._pairs(["epochs=10", "lr=0.1", "flag=true", "name=resnet", "empty="], "--hp", typed=True) == {
        "epochs": 10, "lr": 0.1, "flag": True, "name": "resnet", "empty": ""}

"""Local paths never name Airflow's own files or the workspace, whatever [training] local_roots allows."""

import os

import pytest

from operators.jobspec.local_paths import airflow_private_paths, check_private_paths
from operators.jobspec.errors import SpecError


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "airflow"
    (home / "workspace").mkdir(parents=True)
    (home / "airflow.cfg").write_text("[core]\n")
    (home / "demo-bucket" / "data").mkdir(parents=True)
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.delenv("AIRFLOW_CONFIG", raising=False)
    return home


def spec(**fields):
    return {"source_dir": "s3://bucket/code", "output_path": "s3://bucket/out", "inputs": {}, **fields}


def private(home):
    return airflow_private_paths(str(home / "workspace"))


def test_ordinary_local_paths_and_object_storage_pass(home):
    check_private_paths(spec(inputs={"train": str(home / "demo-bucket" / "data"), "test": "s3://b/test"},
                             output_path=f"file://{home}/demo-bucket/out"), private(home))


@pytest.mark.parametrize("field", ["inputs.x", "source_dir", "output_path", "checkpoint_path", "resume_from"])
def test_airflow_files_as_any_field_are_refused_naming_the_field(home, field):
    uri = str(home / "airflow.cfg") if field != "resume_from" else str(home / "workspace" / "model.tar.gz")
    fields = {"inputs": {"x": uri}} if field == "inputs.x" else {field: uri}
    with pytest.raises(SpecError, match=rf"^{field}: local path .* Airflow's own files"):
        check_private_paths(spec(**fields), private(home))


def test_a_directory_holding_airflow_home_is_refused(home):
    with pytest.raises(SpecError, match="inputs.all"):
        check_private_paths(spec(inputs={"all": str(home.parent)}), private(home))


def test_a_symlink_to_airflow_files_is_followed(home):
    link = home / "demo-bucket" / "cfg"
    os.symlink(home / "airflow.cfg", link)
    with pytest.raises(SpecError, match="inputs.x"):
        check_private_paths(spec(inputs={"x": str(link)}), private(home))


def test_the_sdks_areas_of_the_workspace_are_the_only_exceptions(home):
    # The SDK uploads a packed source_dir through the plugin into <workspace>/staging/code/ and defaults
    # output_path to <workspace>/models: the platform fills those itself, for those fields only.
    staging, models = home / "workspace" / "staging" / "code", home / "workspace" / "models"
    staging.mkdir(parents=True)
    areas = {str(staging): ("source_dir",), str(models): ("output_path", "resume_from")}
    archive = str(staging / ("ab" * 32 + ".tar.gz"))
    check_private_paths(spec(source_dir=archive, output_path=str(models), resume_from=str(models / "j/m.tar.gz")),
                        private(home), areas)
    with pytest.raises(SpecError, match="^inputs.x"):
        check_private_paths(spec(inputs={"x": archive}), private(home), areas)
    with pytest.raises(SpecError, match="^output_path"):
        check_private_paths(spec(output_path=str(staging)), private(home), areas)
    with pytest.raises(SpecError, match="^source_dir"):
        check_private_paths(spec(source_dir=archive), private(home))


def test_the_simple_auth_managers_passwords_and_the_logs_are_refused(home, monkeypatch):
    generated = home / "simple_auth_manager_passwords.json.generated"
    generated.write_text("{}")
    configured = home / "passwords.json"
    configured.write_text("{}")
    (home / "logs" / "dag_id=training_job").mkdir(parents=True)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(configured))
    for uri, field in ((str(generated), "inputs.x"), (str(configured), "inputs.x"),
                       (str(home / "logs" / "dag_id=training_job"), "inputs.x"),
                       (f"file://{home / 'logs'}", "output_path")):
        fields = {"inputs": {"x": uri}} if field == "inputs.x" else {field: uri}
        with pytest.raises(SpecError, match=f"^{field}: .*Airflow's own files"):
            check_private_paths(spec(**fields), private(home))

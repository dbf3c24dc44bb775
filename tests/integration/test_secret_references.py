"""Secret references are authorised (issue 24), through the served Airflow (tests/integration/airflow_server.py) and
its REST API, with the simple auth manager's roles: a `User` may trigger training_job but not read connections or
Variables (403 on GET /api/v2/connections/prod_db), a `Viewer` may not trigger, an `Op` may read both.

The admin's [training] secret_references here allows training_job (and only it) to reference the connection prod_db
and the Variable ops_api_key. A reference the triggering user may not read, or one the policy does not allow for the
DAG, is refused when the run is created, in one line naming the field and the reference: no run, no job root. The
allowed references, by a user who may read them, pass the run's first task and reach the job."""

from __future__ import annotations

import hashlib
import json
import tarfile
import textwrap

import pytest

from airflow_server import Api, airflow_deployment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

POLICY = {"training_job": {"connections": ["prod_db"], "variables": ["ops_api_key"]}}
USERS = "admin:admin,alice:user,victor:viewer,oscar:op"
PASSWORD, TOKEN = "pw-of-prod-db-0123", "ops-token-4567"
REFERENCES = {"P": {"connection": "prod_db", "field": "password"}, "V": {"variable": "ops_api_key"}}
TRAIN = textwrap.dedent('''
    import hashlib, os
    digest = hashlib.sha256((os.environ["P"] + "|" + os.environ["V"]).encode()).hexdigest()
    open(os.path.join(os.environ["TM_MODEL_DIR"], "digest.txt"), "w").write(digest)
''')


@pytest.fixture(scope="module")
def server(tmp_path_factory, postgres_server):
    env = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
           "AIRFLOW__TRAINING__SECRET_REFERENCES": json.dumps(POLICY)}
    with airflow_deployment(tmp_path_factory, postgres_server, extra_env=env, name="secret-references") as server:
        server._wait_for_dag("hyperparameter_search", 240)
        admin = server.api
        assert admin.call("POST", "/api/v2/connections", {"connection_id": "prod_db", "conn_type": "postgres",
                                                          "host": "db.internal", "password": PASSWORD})[0] == 201
        assert admin.call("POST", "/api/v2/variables", {"key": "ops_api_key", "value": TOKEN})[0] == 201
        yield server


def user(server, name: str) -> Api:
    """A REST client logged in as `name` (the auth manager wrote the generated passwords to the passwords file)."""
    return server.user_api(name)


def job_conf(tmp_path, name: str, **extra) -> dict:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(TRAIN)
    return {"job_name": name, "source_dir": str(code), "entry_point": "train.py",
            "output_path": str(tmp_path / "models"), **extra}


def refused(server, api: Api, dag_id: str, conf: dict) -> str:
    """Trigger as `api`'s user; assert nothing was created and return the refusal's one line."""
    run_id = f"refused-{conf['job_name']}"
    status, body = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                            {"logical_date": None, "conf": conf, "dag_run_id": run_id})
    assert status == 403, body
    assert server.api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")[0] == 404
    assert not (server.home / "workspace" / "jobs" / conf["job_name"]).exists()
    assert isinstance(body["detail"], str) and "\n" not in body["detail"]
    return body["detail"]


def test_a_user_is_refused_references_it_may_not_read_and_nothing_is_created(server, tmp_path):
    alice = user(server, "alice")
    # the setting: the User may not read either secret through the API...
    assert alice.call("GET", "/api/v2/connections/prod_db")[0] == 403
    assert alice.call("GET", "/api/v2/variables/ops_api_key")[0] == 403
    # ...so it may not have a job read them either, even where the admin's policy allows them for the DAG
    line = refused(server, alice, "training_job", job_conf(tmp_path, "alice-conn", environment=REFERENCES))
    assert line == ("environment.P: user 'alice' may not read Airflow connection 'prod_db'; ask an Airflow admin "
                    "for read access to it, or remove the reference")
    line = refused(server, alice, "training_job",
                   job_conf(tmp_path, "alice-var", environment={"V": REFERENCES["V"]}))
    assert line.startswith("environment.V: user 'alice' may not read Airflow Variable 'ops_api_key';")
    line = refused(server, alice, "training_job",
                   job_conf(tmp_path, "alice-docker", docker={"secret_variables": {"TOKEN": "ops_api_key"}}))
    assert line.startswith("docker.secret_variables.TOKEN: user 'alice' may not read Airflow Variable 'ops_api_key'")
    line = refused(server, alice, "training_job", job_conf(tmp_path, "alice-storage", connections={"s3": "prod_db"}))
    assert line.startswith("connections.s3: user 'alice' may not read Airflow connection 'prod_db'")


def test_a_viewer_gets_airflows_own_refusal_which_says_nothing_about_the_references(server, tmp_path):
    line = refused(server, user(server, "victor"), "training_job",
                   job_conf(tmp_path, "victor-conn", environment=REFERENCES))
    assert "prod_db" not in line and "environment" not in line


def test_references_the_policy_does_not_allow_for_the_dag_are_refused_even_to_a_reader(server, tmp_path):
    oscar = user(server, "oscar")
    assert oscar.call("GET", "/api/v2/connections/prod_db")[0] == 200  # an Op may read it
    conf = {**job_conf(tmp_path, "oscar-search", environment=REFERENCES), "objective": "loss",
            "search_space": {"lr": [0.1, 0.2]}}
    line = refused(server, oscar, "hyperparameter_search", conf)
    assert line == ("environment.P: Airflow connection 'prod_db' may not be referenced by runs of DAG "
                    "'hyperparameter_search'; an Airflow admin can allow it in airflow.cfg [training] "
                    "secret_references, or remove the reference")
    line = refused(server, oscar, "training_job",
                   job_conf(tmp_path, "oscar-other", environment={"O": {"variable": "other_key"}}))
    assert line.startswith("environment.O: Airflow Variable 'other_key' may not be referenced by runs of DAG "
                           "'training_job'")


def test_materializing_the_model_asset_is_checked_like_a_trigger(server, tmp_path):
    oscar = user(server, "oscar")
    status, assets = server.api.call("GET", "/api/v2/assets?limit=100")
    assert status == 200, assets
    model = [a["id"] for a in assets["assets"]
             if any(t["dag_id"] == "training_job" for t in a.get("producing_tasks", []))]
    assert len(model) == 1, assets
    conf = job_conf(tmp_path, "oscar-materialize", environment={"O": {"variable": "other_key"}})
    status, body = oscar.call("POST", f"/api/v2/assets/{model[0]}/materialize", {"conf": conf})
    assert status == 403 and body["detail"].startswith(
        "environment.O: Airflow Variable 'other_key' may not be referenced by runs of DAG 'training_job'"), body
    assert not (server.home / "workspace" / "jobs" / "oscar-materialize").exists()


def test_references_allowed_for_the_dag_by_a_user_who_may_read_them_reach_the_job(server, tmp_path):
    oscar = user(server, "oscar")
    conf = job_conf(tmp_path, "oscar-allowed", environment=REFERENCES)
    status, run = oscar.call("POST", "/api/v2/dags/training_job/dagRuns",
                             {"logical_date": None, "conf": conf, "dag_run_id": "oscar-allowed"})
    assert status == 200, run
    run = server.wait_for_run("training_job", "oscar-allowed")
    states = server.task_states("training_job", "oscar-allowed")
    assert states[("validate_spec", -1)] == "success" and run["state"] == "success", states
    with tarfile.open(tmp_path / "models/oscar-allowed/output/model.tar.gz") as tar:
        digest = tar.extractfile("digest.txt").read().decode()
    assert digest == hashlib.sha256(f"{PASSWORD}|{TOKEN}".encode()).hexdigest()

"""Parameterized triggering, the three ways users do it, against a running Airflow: `airflow api-server` (REST API v2,
simple auth manager, JWT from /auth/token) and `airflow scheduler` (LocalExecutor) started here on loopback, sharing
the session's metadata DB. The trigger form's Params are checked where the UI reads them (the serialized DAG behind
/dags/{id}/details); `airflow dags trigger --conf`, POST /dags/{id}/dagRuns and an Asset event (POST /assets/events:
new data for a retraining DAG) create runs that the scheduler runs to the end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]

PASSWORD = "trigger-test-password"
AIRFLOW = [sys.executable, "-m", "airflow"]
REPO = Path(__file__).resolve().parents[2]

# A retraining DAG with no cron: it runs when its data Asset gets an event.
RETRAIN_ON_DATA = """
dag_id: retrain_on_data
schedule: {{assets: [churn_data_landed]}}
job:
  base_job_name: churn
  source_dir: {code}
  entry_point: train.py
  hyperparameters: {{epochs: 3}}
  inputs: {{train: {data}/}}
  output_path: {models}
  metric_definitions: [{{Name: loss, Regex: "loss=([0-9.]+)"}}]
gate: {{objective: loss, threshold: 1.0}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Api:
    """A tiny REST client: JSON in, (status, JSON) out; the bearer token comes from POST /auth/token."""

    def __init__(self, base: str):
        self.base = base
        self.token = None

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def login(self) -> None:
        status, body = self.call("POST", "/auth/token", {"username": "admin", "password": PASSWORD})
        assert status == 201, body
        self.token = body["access_token"]


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def airflow_services(airflow_home, tmp_path_factory):
    """api-server on a free loopback port; `scheduler()` starts the scheduler once the test has set up its runs."""
    tmp = tmp_path_factory.mktemp("services")
    port = free_port()
    (tmp / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    (tmp / "configs").mkdir()
    (tmp / "configs" / "on_data.yaml").write_text(RETRAIN_ON_DATA.format(
        code=REPO / "examples" / "logistic_regression", data=tmp / "data" / "train", models=tmp / "retrained"))
    env = {
        **os.environ,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-secret-of-this-test-only",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp / "passwords.json"),
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__TRAINING__RETRAINING_CONFIGS": str(tmp / "configs"),
    }
    # The api-server and the scheduler read DAGs from the DB: serialize the dags/ folder first.
    subprocess.run([*AIRFLOW, "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=180)
    procs = [start([*AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], env,
                   tmp / "api-server.log")]
    api = Api(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 120
    while True:
        try:
            if api.call("GET", "/api/v2/monitor/health")[0] == 200:
                break
        except OSError:
            pass
        assert procs[0].poll() is None, (tmp / "api-server.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "api-server did not become healthy in 120 s"
        time.sleep(0.5)
    api.login()

    def scheduler() -> None:
        procs.append(start([*AIRFLOW, "scheduler"], env, tmp / "scheduler.log"))

    try:
        yield SimpleNamespace(api=api, env=env, tmp=tmp, scheduler=scheduler)
    finally:
        for proc in reversed(procs):
            stop(proc)


def test_trigger_form_params_in_the_served_dags(airflow_services):
    api = airflow_services.api
    status, details = api.call("GET", "/api/v2/dags/hyperparameter_search/details")
    assert status == 200, details
    params = details["params"]
    assert params["strategy"]["value"] == "random"
    draft_7 = {"$schema": "http://json-schema.org/draft-07/schema#"}  # the cheap meta-schema check at each resolve
    assert params["strategy"]["schema"] == {"type": "string", "enum": ["random", "grid"], "section": "Search",
                                            **draft_7}
    assert "grid: every combination" in params["strategy"]["description"]
    assert params["direction"]["schema"]["enum"] == ["minimize", "maximize"]
    assert params["max_trials"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 200, "section": "Search",
                                              **draft_7}
    assert params["early_stopping"]["value"] == "median"
    assert params["early_stopping"]["schema"]["section"] == "Early stopping"
    assert params["search_space"]["schema"]["type"] == "object"
    assert "log_uniform" in params["search_space"]["description"]
    assert params["seed"]["schema"]["type"] == ["null", "integer"]
    # the job spec part of the form is the training_job one: required fields have no default
    assert params["source_dir"]["value"] is None and params["source_dir"]["schema"]["minLength"] == 1
    assert params["layout"]["schema"]["enum"] == [None, "ti", "sagemaker", "pai", "modelarts"]
    assert {p["schema"].get("section") for p in params.values()} == {
        "Job", "Code", "Data", "Resources", "Search", "Early stopping", "Reproduce"}
    assert all(p["description"] for p in params.values())

    status, details = api.call("GET", "/api/v2/dags/training_job/details")
    assert status == 200 and details["params"]["instance_count"]["schema"]["minimum"] == 1


def test_bad_conf_is_refused_naming_the_param(airflow_services, tmp_path):
    api = airflow_services.api
    conf = {"source_dir": str(tmp_path), "entry_point": "train.py", "output_path": str(tmp_path), "layout": "k8s"}
    status, body = api.call("POST", "/api/v2/dags/training_job/dagRuns", {"logical_date": None, "conf": conf})
    assert status == 400 and "param layout" in body["detail"], body
    status, body = api.call("POST", "/api/v2/dags/hyperparameter_search/dagRuns",
                            {"logical_date": None, "conf": {**conf, "layout": None, "strategy": "bayesian"}})
    assert status == 400 and "param strategy" in body["detail"], body

    bad = {**conf, "layout": None, "max_run_seconds": 0}
    cli = subprocess.run([*AIRFLOW, "dags", "trigger", "training_job", "--conf", json.dumps(bad)],
                         env=airflow_services.env, capture_output=True, text=True, timeout=120)
    assert cli.returncode != 0 and "Invalid input for param max_run_seconds" in cli.stderr, cli.stderr[-2000:]


TRAIN = textwrap.dedent('''
    import argparse, os
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); p.add_argument("--epochs", type=int)
    args = p.parse_args()
    for epoch in range(args.epochs):
        print(f"epoch={epoch} loss={abs(args.lr - 0.3) + 1.0 / (epoch + 1):.4f}", flush=True)
    open(os.path.join(os.environ["TM_MODEL_DIR"], "lr.txt"), "w").write(str(args.lr))
''')


def wait_for_run(api: Api, dag_id: str, run_id: str, services, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status, run = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        assert status == 200, run
        if run["state"] in ("success", "failed"):
            return run
        if time.monotonic() > deadline:
            log = (services.tmp / "scheduler.log").read_text(errors="replace")[-4000:]
            pytest.fail(f"{dag_id} {run_id} still {run['state']} after {timeout} s; scheduler log:\n{log}")
        time.sleep(1)


def wait_for_asset_triggered_run(api: Api, dag_id: str, services, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        _, body = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?run_type=asset_triggered")
        if body.get("dag_runs"):
            return wait_for_run(api, dag_id, body["dag_runs"][0]["dag_run_id"], services, deadline - time.monotonic())
        if time.monotonic() > deadline:
            log = (services.tmp / "scheduler.log").read_text(errors="replace")[-4000:]
            pytest.fail(f"no asset-triggered run of {dag_id} after {timeout} s; scheduler log:\n{log}")
        time.sleep(1)


def task_states(api: Api, dag_id: str, run_id: str) -> dict:
    _, body = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
    return {(t["task_id"], t["map_index"]): t["state"] for t in body["task_instances"]}


def xcom(api: Api, dag_id: str, run_id: str, task_id: str):
    status, body = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/"
                                   "return_value?deserialize=true")
    assert status == 200, body
    return body["value"]


def test_runs_triggered_by_cli_conf_rest_api_and_an_asset_event_run_to_the_end(airflow_services, tmp_path):
    api = airflow_services.api
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    models = tmp_path / "models"
    job = {"source_dir": str(code), "entry_point": "train.py", "output_path": str(models),
           "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    # Only the DAGs under test may run: pause the others (e.g. retraining DAGs whose cron time has passed).
    _, dags = api.call("GET", "/api/v2/dags?limit=100")
    for dag in dags["dags"]:
        paused = dag["dag_id"] not in ("training_job", "hyperparameter_search", "retrain_on_data")
        assert api.call("PATCH", f"/api/v2/dags/{dag['dag_id']}", {"is_paused": paused})[0] == 200

    # 1. `airflow dags trigger --conf`
    cli_conf = {**job, "job_name": "cli-run", "hyperparameters": {"lr": 0.25, "epochs": 3}}
    cli = subprocess.run([*AIRFLOW, "dags", "trigger", "training_job", "--run-id", "cli-run", "--conf",
                          json.dumps(cli_conf)], env=airflow_services.env, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stdout[-2000:] + cli.stderr[-2000:]

    # 2. the REST API: a 2-trial grid search
    search_conf = {**job, "job_name": "rest-search", "hyperparameters": {"epochs": 2}, "objective": "loss",
                   "strategy": "grid", "search_space": {"lr": [0.1, 0.3]}, "early_stopping": "none"}
    status, run = api.call("POST", "/api/v2/dags/hyperparameter_search/dagRuns",
                           {"dag_run_id": "rest-search", "logical_date": None, "conf": search_conf})
    assert status == 200, run
    assert run["state"] == "queued" and run["conf"] == search_conf

    # 3. new data lands: an event of the retraining DAG's data Asset, posted through the REST API
    data = airflow_services.tmp / "data" / "train"
    data.mkdir(parents=True)
    rows = [(x, 1.0 if x > 0 else 0.0) for x in (-2.0, -1.0, -0.5, 0.5, 1.0, 2.0)]
    (data / "part-0.csv").write_text("".join(f"{x},{y}\n" for x, y in rows))
    _, assets = api.call("GET", "/api/v2/assets?name_pattern=churn_data_landed")
    status, event = api.call("POST", "/api/v2/assets/events",
                             {"asset_id": assets["assets"][0]["id"], "extra": {"rows": len(rows)}})
    assert status == 200, event

    airflow_services.scheduler()
    cli_run = wait_for_run(api, "training_job", "cli-run", airflow_services)
    search_run = wait_for_run(api, "hyperparameter_search", "rest-search", airflow_services)
    retrain_run = wait_for_asset_triggered_run(api, "retrain_on_data", airflow_services)
    assert retrain_run["state"] == "success", task_states(api, "retrain_on_data", retrain_run["dag_run_id"])
    pointer = json.loads((airflow_services.tmp / "retrained" / "churn" / "latest.json").read_text())
    assert pointer["model_uri"] == xcom(api, "retrain_on_data", retrain_run["dag_run_id"], "promote_model")
    assert cli_run["state"] == "success", task_states(api, "training_job", "cli-run")
    assert search_run["state"] == "success", task_states(api, "hyperparameter_search", "rest-search")

    assert cli_run["conf"]["hyperparameters"] == {"lr": 0.25, "epochs": 3}
    assert xcom(api, "training_job", "cli-run", "publish_model") == str(models / "cli-run/output/model.tar.gz")
    assert (models / "cli-run/output/model.tar.gz").is_file()

    best = xcom(api, "hyperparameter_search", "rest-search", "publish_best_model")
    assert best == str(models / "rest-search-t02/output/model.tar.gz")  # lr 0.3: the lowest loss
    states = task_states(api, "hyperparameter_search", "rest-search")
    assert states[("trial.launch_training", 0)] == states[("trial.launch_training", 1)] == "success"
    summary = json.loads((models / "rest-search/search_summary.json").read_text())
    assert [(t["params"]["lr"], t["status"]) for t in summary["trials"]] == [(0.1, "completed"), (0.3, "completed")]

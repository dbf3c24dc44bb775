"""The served Airflow (the components of `make airflow`, started by tests/integration/airflow_server.py): a training_job
run triggered through the REST API is run to the end by the real scheduler, dag-processor and API server, with the
shared secrets (a task token the API server refused would fail every task with an empty log)."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from metadata_db import clone_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TRAIN = textwrap.dedent('''
    import argparse, json, os
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); p.add_argument("--epochs", type=int)
    args = p.parse_args()
    for epoch in range(args.epochs):
        print(f"epoch={epoch} loss={abs(args.lr - 0.3) + 1.0 / (epoch + 1):.4f} accuracy={0.5 + epoch / 20:.3f}", flush=True)
    open(os.path.join(os.environ["TM_MODEL_DIR"], "lr.txt"), "w").write(str(args.lr))
''')


def job_conf(tmp_path, name: str, **extra) -> dict:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(TRAIN)
    extra.setdefault("hyperparameters", {"lr": 0.25, "epochs": 4})
    return {"job_name": name, "source_dir": str(code), "entry_point": "train.py", "output_path": str(tmp_path / "models"),
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"},
                                   {"Name": "accuracy", "Regex": "accuracy=([0-9.]+)"}], **extra}


def test_rest_triggered_training_job_succeeds_through_the_scheduler(airflow_server, tmp_path):
    conf = job_conf(tmp_path, "rest-ui-job")
    run = airflow_server.trigger("training_job", conf, run_id="rest-ui-job")
    run = airflow_server.wait_for_run("training_job", run["dag_run_id"])
    states = airflow_server.task_states("training_job", "rest-ui-job")
    assert run["state"] == "success", states
    assert set(states.values()) == {"success"}
    assert (tmp_path / "models/rest-ui-job/output/model.tar.gz").is_file()
    metrics = json.loads((tmp_path / "models/rest-ui-job/output/metrics.json").read_text())
    assert metrics["final"]["loss"] == pytest.approx(0.3)  # |0.25 - 0.3| + 1/4
    # the task log came through the API server (an empty log was the symptom of unshared secrets)
    status, log = airflow_server.api.call(
        "GET", "/api/v2/dags/training_job/dagRuns/rest-ui-job/taskInstances/launch_training/logs/1?full_content=true")
    assert status == 200 and "loss=0.3000" in json.dumps(log), log
    _, links = airflow_server.api.call(
        "GET", "/api/v2/dags/training_job/dagRuns/rest-ui-job/taskInstances/upload_artifacts/links")
    assert links["extra_links"]["Failure reason"] is None and links["extra_links"]["Model"], links  # nothing failed



def test_a_failed_job_shows_its_stage_class_and_reason_and_the_links_serve_them(airflow_server, tmp_path):
    conf = job_conf(tmp_path, "ui-failing-job", hyperparameters={"lr": "not-a-number", "epochs": 2})
    airflow_server.trigger("training_job", conf, run_id="ui-failing-job")
    assert airflow_server.wait_for_run("training_job", "ui-failing-job")["state"] == "failed"
    api = airflow_server.api
    status, job = api.call("GET", "/training-jobs/api/jobs/training_job/ui-failing-job/-1")
    assert status == 200, job
    assert (job["status"], job["failed_stage"], job["failure_class"]) == ("failed", "launch_training", "user_error")
    assert "invalid float value: 'not-a-number'" in job["failure"]
    _, links = api.call("GET", "/api/v2/dags/training_job/dagRuns/ui-failing-job/taskInstances/upload_artifacts/links")
    reason = links["extra_links"]["Failure reason"]
    assert reason == f"{airflow_server.base_url}/training-jobs/api/jobs/training_job/ui-failing-job/-1/artifacts/failure"
    status, body, headers = api.raw("GET", reason.removeprefix(airflow_server.base_url))
    assert status == 200 and b"not-a-number" in body and headers["content-type"].startswith("text/plain")
    assert links["extra_links"]["Host logs"].endswith("/training-jobs/ui/#/job/training_job/ui-failing-job/-1/logs")
    status, body, _ = api.raw("GET", "/training-jobs/api/jobs/training_job/ui-failing-job/-1/artifacts/model.tar.gz")
    assert status == 404 and b"does not exist" in body  # no model after a failure, and the reply says so


def test_a_refused_spec_says_why_on_the_job_page(airflow_server, tmp_path):
    conf = job_conf(tmp_path, "ui-refused-job", entry_point="trian.py")
    airflow_server.trigger("training_job", conf, run_id="ui-refused-job")
    assert airflow_server.wait_for_run("training_job", "ui-refused-job")["state"] == "failed"
    status, job = airflow_server.api.call("GET", "/training-jobs/api/jobs/training_job/ui-refused-job/-1")
    assert status == 200, job
    assert (job["status"], job["failed_stage"]) == ("failed", "validate_spec")
    assert job["failure"] == f"invalid job spec: entry_point: trian.py is not in source_dir {tmp_path / 'code'}; " \
                             "give a file that is there (a path relative to source_dir)"
    states = airflow_server.task_states("training_job", "ui-refused-job")
    assert states[("stage_code", -1)] == "upstream_failed", states  # refused before anything was staged


HANG = 30.0


def test_the_jobs_list_pages_a_thousand_jobs(airflow_server, tmp_path):
    conf = job_conf(tmp_path, "scale-job")
    airflow_server.trigger("training_job", conf, run_id="scale-job")
    assert airflow_server.wait_for_run("training_job", "scale-job")["state"] == "success"
    clone_run(airflow_server.db_url, "training_job", "scale-job", 1000)
    api = airflow_server.api
    timings = {}
    for name, query in (("newest first", ""), ("sorted by loss", "&sort=metric:loss&order=asc"),
                        ("filtered", "&q=scale&status=succeeded"), ("page 10", "&offset=450")):
        start = time.perf_counter()
        status, page = api.call("GET", f"/training-jobs/api/jobs?limit=50{query}")
        timings[name] = time.perf_counter() - start
        assert status == 200, page
        assert page["total"] >= 1001 and len(page["items"]) == 50, (name, page["total"])
    print("\njobs list with", page["total"], "jobs:", ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in timings.items()))
    # Not a speed target (bench/bench_console.py measures the list's speed on a quiet machine; here two shared cores
    # run the whole suite): a page this slow is a hang a user would report.
    assert max(timings.values()) < HANG, timings
    start = time.perf_counter()
    status, job = api.call("GET", "/training-jobs/api/jobs/training_job/scale-job-copy0500/-1")
    assert status == 200 and job["status"] == "succeeded" and job["metrics"]["loss"] == pytest.approx(0.3)
    assert time.perf_counter() - start < HANG

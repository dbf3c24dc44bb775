"""`training-job reproduce` / TrainingJob.reproduce against a stand-in for the view's route and Airflow's trigger API
(a real HTTP server on loopback): the conf the view answers is triggered as it is, under a new job name that is also
the run id, with allow_changed_data as asked; a refusal is the view's one line and nothing is triggered. (The real
Airflow and view: tests/integration/test_sdk.py.)"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from training_sdk import cli

CONF = {"source_dir": "/ws/staging/code/alice/" + "e" * 64 + ".tar.gz", "entry_point": "train.py",
        "base_job_name": "churn", "inputs": {"train": "s3://d/train/"},
        "reproduces": {"job_name": "churn-1", "dag_id": "training_job", "run_id": "manual__1",
                       "code_digest": "sha256:" + "c" * 64, "data_versions": {"train": "a" * 64},
                       "image_digest": None, "lineage_uri": None, "allow_changed_data": False}}
REFUSAL = "job 'churn-1' is not a run of user 'bob'; a reproduction reproduces only your own runs"


@pytest.fixture
def server():
    triggered: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, status: int, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            if self.path == "/training-jobs/api/jobs/training_job/manual__1/-1/reproduction":
                return self._answer(200, {"dag_id": "training_job", "conf": CONF})
            if self.path == "/training-jobs/api/jobs/training_job/manual__2/-1/reproduction":
                return self._answer(409, {"detail": REFUSAL})
            return self._answer(404, {"detail": "not here"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            if self.path == "/auth/token":
                return self._answer(201, {"access_token": "t"})
            triggered.append((self.path, body))
            return self._answer(200, {"dag_run_id": body.get("dag_run_id")})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", triggered
    httpd.shutdown()


def test_reproduce_triggers_the_views_conf_under_a_new_name_and_prints_it(server, capsys, monkeypatch):
    url, triggered = server
    monkeypatch.setenv("TRAINING_API_PASSWORD", "x")
    assert cli.main(["--api-url", url, "reproduce", "training_job", "manual__1", "--allow-changed-data"]) == 0
    printed = capsys.readouterr().out.strip()
    [(path, body)] = triggered
    assert path == "/api/v2/dags/training_job/dagRuns"
    assert body["dag_run_id"] == printed == body["conf"]["job_name"] and printed.startswith("churn-")
    assert body["conf"]["reproduces"] == {**CONF["reproduces"], "allow_changed_data": True}
    assert {k: v for k, v in body["conf"].items() if k not in ("job_name", "reproduces")} == {
        k: v for k, v in CONF.items() if k != "reproduces"}


def test_a_refusal_is_the_views_one_line_and_nothing_is_triggered(server, capsys, monkeypatch):
    url, triggered = server
    monkeypatch.setenv("TRAINING_API_PASSWORD", "x")
    assert cli.main(["--api-url", url, "reproduce", "training_job", "manual__2"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"training-job: cannot reproduce run manual__2 of training_job: {REFUSAL}")
    assert triggered == []

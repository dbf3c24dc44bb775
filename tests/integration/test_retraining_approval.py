"""Approval before promotion through the served Airflow (tests/integration/airflow_server.py: the real scheduler,
dag-processor and API server): runs of dags/retraining_approval_demo.py (the retraining template with the demo model)
switched to require approval at trigger time. One is approved through the REST API by olivia, an Op user, and
promotes; the next is rejected by her with a reason and keeps the promoted model; the third gets no answer and times
out (30 s) to the DAG's default, reject. The runs of one retraining DAG never overlap (max_active_runs=1), so the three
are queued at once and answered in turn. Four eyes: a run alice (User) triggers is not hers to approve, nor bob's
(User, not the approver role [training] approver_role, op): both are refused by the API server, and so is alice's
forged XCom decision; olivia approves it. Her next run's question marked "success" by hand promotes nothing."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

from test_retraining_dag import csv_rows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAG_ID = "retrain_approval_demo"
RUNS = ("approval-approved", "approval-rejected", "approval-timed-out")


@pytest.fixture(scope="module")
def approval_dag(airflow_server):
    api = airflow_server.api
    deadline = time.monotonic() + 240
    while api.call("GET", f"/api/v2/dags/{DAG_ID}")[0] != 200:  # the dag-processor parses it after training_job
        assert time.monotonic() < deadline, airflow_server.log_tail("dag-processor")
        time.sleep(1)
    assert api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200  # paused at creation
    return airflow_server


def hitl_path(run_id: str) -> str:
    return f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approve_promotion/-1/hitlDetails"


def wait_until_asked(server, run_id: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        state = server.task_states(DAG_ID, run_id).get(("approve_promotion", -1))
        if state == "awaiting_input":
            wait_for_parked_exit(server, run_id, deadline)
            return
        assert state not in ("success", "failed", "skipped", "upstream_failed"), server.task_states(DAG_ID, run_id)
        assert time.monotonic() < deadline, (state, server.log_tail("scheduler"))
        time.sleep(0.5)


def wait_for_parked_exit(server, run_id: str, deadline: float) -> None:
    """Airflow 3.3.2: an answer that lands before the scheduler has processed the exit of the parked task's process
    fails the task (the executor's "success" for a task the answer already re-queued reads as an external kill). A
    person takes longer than that; a test on a loaded machine does not, so it answers only after the scheduler logged
    that event (9 s after the question, once, on two busy cores)."""
    parked = (f"Received executor event with state success for task instance TaskInstanceKey(dag_id='{DAG_ID}', "
              f"task_id='approve_promotion', run_id='{run_id}'")
    while parked not in (server.home / "scheduler.log").read_text(errors="replace"):
        assert time.monotonic() < deadline, server.log_tail("scheduler")
        time.sleep(0.5)


def xcom(server, run_id: str, task_id: str, key: str):
    status, body = server.api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/"
                                          f"xcomEntries/{key}?deserialize=true")
    assert status == 200, body
    return body["value"]


def test_a_person_approves_rejects_or_lets_the_default_decide(approval_dag, tmp_path):
    server = approval_dag
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    (data / "part-0.csv").write_bytes(csv_rows(1, noisy=False))
    pointer_file = tmp_path / "models" / "logreg-approval" / "latest.json"
    conf = {"data": f"{data}/", "output_path": str(tmp_path / "models"), "require_approval": True}
    for run_id in RUNS:  # queued behind each other: each run builds on the one before
        server.trigger(DAG_ID, conf, run_id=run_id)
    olivia = server.user_api("olivia")

    # 1. Asked: the candidate beside the promoted model (none yet), and approved over REST by an Op user.
    wait_until_asked(server, "approval-approved")
    status, asked = olivia.call("GET", hitl_path("approval-approved"))
    assert status == 200, asked
    assert asked["subject"].startswith("Promote logreg-approval-") and "(loss " in asked["subject"]
    assert asked["options"] == ["Approve", "Reject"] and asked["defaults"] == ["Reject"]
    assert "| metric | candidate | promoted model |" in asked["body"]
    assert "* Promoted model: none yet: this would be the first" in asked["body"]
    assert (f"{server.base_url}/training-jobs/ui/compare.html?job={quote(quote(DAG_ID) + '/approval-approved/-1', '')}"
            in asked["body"])
    assert "No answer within 30s: **reject**" in asked["body"] and list(asked["params"]) == ["reason"]
    status, answer = olivia.call("PATCH", hitl_path("approval-approved"),
                                 {"chosen_options": ["Approve"], "params_input": {"reason": "better on the holdout"}})
    assert status == 200 and answer["responded_by"]["name"] == "olivia", answer
    assert server.wait_for_run(DAG_ID, "approval-approved")["state"] == "success"
    assert server.task_states(DAG_ID, "approval-approved")[("promote_model", -1)] == "success"
    approved = xcom(server, "approval-approved", "approve_promotion", "decision")
    assert (approved["decision"], approved["by"], approved["reason"]) == ("approved", "olivia", "better on the holdout")
    promoted = json.loads(pointer_file.read_text())
    assert promoted["run_id"] == "approval-approved" and promoted["model_uri"] == xcom(
        server, "approval-approved", "promote_model", "return_value")
    assert promoted["approval"]["by"] == "olivia" and not promoted["approval"]["timed_out"]

    # 2. The next candidate is shown against the model just promoted; rejected with a reason, it is not promoted.
    wait_until_asked(server, "approval-rejected")
    _, asked = olivia.call("GET", hitl_path("approval-rejected"))
    loss = promoted["metrics"]["loss"]
    assert f" vs {loss:g})" in asked["subject"] and f"| {loss:g} |" in asked["body"]
    assert f"* Promoted model: `{promoted['model_uri']}`" in asked["body"]
    assert quote(quote(DAG_ID) + "/approval-approved/-1", "") in asked["body"]  # the compare link names both jobs
    status, answer = olivia.call("PATCH", hitl_path("approval-rejected"),
                                 {"chosen_options": ["Reject"], "params_input": {"reason": "drift on segment B"}})
    assert status == 200, answer
    assert server.wait_for_run(DAG_ID, "approval-rejected")["state"] == "success"
    assert server.task_states(DAG_ID, "approval-rejected")[("promote_model", -1)] == "skipped"
    rejected = xcom(server, "approval-rejected", "approve_promotion", "decision")
    assert (rejected["decision"], rejected["by"], rejected["reason"]) == ("rejected", "olivia", "drift on segment B")
    # the training console's job page says who rejected it and why (its API: what the page renders)
    status, job = server.api.call("GET", f"/training-jobs/api/jobs/{DAG_ID}/approval-rejected/-1")
    assert status == 200 and job["approval"]["decision"] == "rejected", job
    assert (job["approval"]["by"], job["approval"]["reason"]) == ("olivia", "drift on segment B")
    assert json.loads(pointer_file.read_text()) == promoted  # the promoted model stays

    # 3. Nobody answers: after 30 s the scheduler applies the DAG's default (reject), answered by no one.
    wait_until_asked(server, "approval-timed-out")
    asked_at = time.monotonic()
    assert server.wait_for_run(DAG_ID, "approval-timed-out")["state"] == "success"
    assert time.monotonic() - asked_at >= 25
    assert server.task_states(DAG_ID, "approval-timed-out")[("promote_model", -1)] == "skipped"
    timed_out = xcom(server, "approval-timed-out", "approve_promotion", "decision")
    assert timed_out["timed_out"] and timed_out["decision"] == "rejected" and timed_out["by"] is None
    assert timed_out["reason"] == "no answer within 30s: the DAG's default (reject)"
    _, detail = server.api.call("GET", hitl_path("approval-timed-out"))
    assert detail["chosen_options"] == ["Reject"] and detail["responded_by_user"] is None
    assert json.loads(pointer_file.read_text()) == promoted


def test_the_user_who_triggered_a_run_cannot_approve_its_promotion(approval_dag, tmp_path):
    server = approval_dag
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    (data / "part-0.csv").write_bytes(csv_rows(1, noisy=False))
    conf = {"data": f"{data}/", "output_path": str(tmp_path / "models"), "require_approval": True}
    alice, bob, olivia = (server.user_api(user) for user in ("alice", "bob", "olivia"))
    status, run = alice.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                             {"logical_date": None, "conf": conf, "dag_run_id": "approval-four-eyes"})
    assert status == 200 and run["triggering_user_name"] == "alice", run
    wait_until_asked(server, "approval-four-eyes")
    _, asked = olivia.call("GET", hitl_path("approval-four-eyes"))
    assert "Who may answer: a user with the role `op`, not `alice` (who triggered this run)." in asked["body"]
    approve = {"chosen_options": ["Approve"], "params_input": {"reason": "looks good to me"}}

    status, answer = alice.call("PATCH", hitl_path("approval-four-eyes"), approve)
    assert status == 403, answer
    assert answer["detail"].startswith("refused: alice triggered this run and cannot answer the approval of its own "
                                       "promotion"), answer
    status, answer = bob.call("PATCH", hitl_path("approval-four-eyes"), approve)
    assert status == 403 and answer["detail"].startswith("refused: bob does not hold the role 'op'"), answer
    # nor can she write the decision promote_model reads
    forged = {"key": "decision", "value": {"asked": True, "approved": True, "decision": "approved", "by": "olivia"}}
    status, answer = alice.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns/approval-four-eyes/taskInstances/"
                                        "approve_promotion/xcomEntries", forged)
    assert status == 403 and answer["detail"].startswith("refused: alice triggered this run"), answer
    _, detail = olivia.call("GET", hitl_path("approval-four-eyes"))
    assert detail["response_received"] is False and detail["responded_by_user"] is None  # nothing was recorded
    assert server.task_states(DAG_ID, "approval-four-eyes")[("approve_promotion", -1)] == "awaiting_input"

    status, answer = olivia.call("PATCH", hitl_path("approval-four-eyes"),
                                 {"chosen_options": ["Approve"], "params_input": {"reason": "checked the holdout"}})
    assert status == 200 and answer["responded_by"]["name"] == "olivia", answer
    assert server.wait_for_run(DAG_ID, "approval-four-eyes")["state"] == "success"
    assert server.task_states(DAG_ID, "approval-four-eyes")[("promote_model", -1)] == "success"
    decision = xcom(server, "approval-four-eyes", "approve_promotion", "decision")
    assert (decision["decision"], decision["by"]) == ("approved", "olivia")
    promoted = (tmp_path / "models" / "logreg-approval" / "latest.json").read_text()

    # Marking her next run's waiting question "success" by hand promotes nothing: promote_model finds no decision.
    status, run = alice.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                             {"logical_date": None, "conf": conf, "dag_run_id": "approval-marked-success"})
    assert status == 200, run
    wait_until_asked(server, "approval-marked-success")
    status, body = alice.call("PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/approval-marked-success/taskInstances/"
                                       "approve_promotion", {"new_state": "success"})
    assert status == 200, body
    assert server.wait_for_run(DAG_ID, "approval-marked-success")["state"] == "failed"
    assert server.task_states(DAG_ID, "approval-marked-success")[("promote_model", -1)] == "failed"
    assert (tmp_path / "models" / "logreg-approval" / "latest.json").read_text() == promoted

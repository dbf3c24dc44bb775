import datetime as dt
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest

from operators.pipelines.approval import (
    PromotionApprovalOperator,
    approval_body,
    compare_url,
    decision_record,
    duration,
)
from operators.pipelines.config_files import ApprovalRule, GateRule, RetrainingConfig

CURRENT = {"model_uri": "s3://b/models/churn-1/output/model.tar.gz", "job_name": "churn-1", "dag_id": "retrain_churn",
           "run_id": "scheduled__2026-11-20T03:00:00+00:00", "promoted_at": "2026-11-20T03:04:05+00:00",
           "metrics": {"loss": 0.40, "auc": 0.80}}
DECISION = {"passed": True, "objective": "loss", "direction": "minimize", "value": 0.31, "current_value": 0.40,
            "reason": "loss 0.31 is better than the promoted model's 0.4", "metrics": {"loss": 0.31, "accuracy": 0.9}}
JOB = {"job_name": "churn-2"}
UPLOAD = {"model_uri": "s3://b/models/churn-2/output/model.tar.gz"}
WHEN = dt.datetime(2026, 11, 21, 3, 4, 5, tzinfo=dt.timezone.utc)


class FakeTI:
    id = "0190-ti"
    map_index = -1

    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def operator(**kwargs):
    args = {"task_id": "approve_promotion", "decision": DECISION, "current": CURRENT, "job": JOB, "upload": UPLOAD,
            "timeout": dt.timedelta(minutes=30), **kwargs}
    return PromotionApprovalOperator(**args)


def context(triggered_by=None, **params):
    return {"params": params, "ti": FakeTI(), "task_instance": FakeTI(), "run_id": "manual__2026-11-21T03:00:00+00:00",
            "dag_run": SimpleNamespace(triggering_user_name=triggered_by)}


def test_the_body_puts_the_candidate_beside_the_promoted_model():
    body = approval_body(DECISION, CURRENT, "churn-2", UPLOAD["model_uri"], "http://x/compare", "reject",
                         dt.timedelta(minutes=30))
    lines = body.splitlines()
    assert lines[0] == "The metric gate passed the candidate: loss 0.31 is better than the promoted model's 0.4."
    assert "| **`loss`** (minimize, the gate's objective) | 0.31 | 0.4 |" in lines
    assert "| `accuracy` | 0.9 | — |" in lines and "| `auc` | — | 0.8 |" in lines  # every metric of either model
    assert f"* Candidate: `{UPLOAD['model_uri']}` (job `churn-2`)" in lines
    assert f"* Promoted model: `{CURRENT['model_uri']}` (job `churn-1`, promoted 2026-11-20T03:04:05+00:00)" in lines
    assert "* [Compare the jobs](http://x/compare): curves, hyperparameters, spec" in lines
    assert lines[-1].endswith("No answer within 30m: **reject** (the DAG's default).")
    first = approval_body(DECISION, None, "churn-2", UPLOAD["model_uri"], "http://x/c", "approve", dt.timedelta(1))
    assert "* Promoted model: none yet: this would be the first" in first and "within 1d: **approve**" in first


def test_tenant_metric_names_cannot_break_out_of_the_table():
    hostile = {**DECISION, "metrics": {"loss": 0.3, "x` | [Approve](http://evil) |\n# h": 1.0}}
    body = approval_body(hostile, None, "churn-2", "s3://m", "http://x/c", "reject", dt.timedelta(hours=1))
    row = next(line for line in body.splitlines() if "evil" in line)
    assert row == "| `x' \\| [Approve](http://evil) \\| # h` | 1 | — |"  # one code span: no link, no column
    many = {**DECISION, "metrics": {f"m{i:03d}": i for i in range(50)} | {"loss": 0.3}}
    body = approval_body(many, None, "churn-2", "s3://m", "http://x/c", "reject", dt.timedelta(hours=1))
    assert body.count("| `m0") == 19 and "| ... 31 more | | |" in body


def test_the_compare_link_names_both_jobs_as_the_compare_page_reads_them(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com")
    url = compare_url("retrain_churn", "manual__2026-11-21T03:00:00+00:00", CURRENT)
    parts = urlsplit(url)
    assert parts.netloc == "airflow.example.com" and parts.path == "/training-jobs/ui/compare.html"
    # URLSearchParams decodes once; compare.js's jobKey is each part URI-encoded, joined with "/"
    assert parse_qs(parts.query)["job"] == ["retrain_churn/manual__2026-11-21T03%3A00%3A00%2B00%3A00/-1",
                                            "retrain_churn/scheduled__2026-11-20T03%3A00%3A00%2B00%3A00/-1"]
    assert parse_qs(urlsplit(compare_url("retrain_churn", "r1", None)).query)["job"] == ["retrain_churn/r1/-1"]


def test_durations_read_as_written():
    assert [duration(dt.timedelta(seconds=s)) for s in (30, 90, 900, 3600, 86400, 172800)] == [
        "30s", "90s", "15m", "1h", "1d", "2d"]


def test_decision_records_who_and_why_or_the_timeout():
    olivia = {"id": "olivia", "name": "olivia"}
    approved = decision_record({"chosen_options": ["Approve"], "params_input": {"reason": " fine "},
                                "responded_by_user": olivia, "responded_at": WHEN}, dt.timedelta(hours=1), "reject")
    assert approved == {"asked": True, "approved": True, "decision": "approved", "by": "olivia", "reason": "fine",
                        "responded_at": "2026-11-21T03:04:05+00:00", "timed_out": False}
    rejected = decision_record({"chosen_options": ["Reject"], "params_input": {}, "responded_by_user": olivia,
                                "responded_at": WHEN}, dt.timedelta(hours=1), "reject")
    assert (rejected["approved"], rejected["by"], rejected["reason"]) == (False, "olivia", "")
    timed_out = decision_record({"chosen_options": ["Reject"], "params_input": {"reason": ""},
                                 "responded_by_user": None, "responded_at": WHEN, "timedout": True},
                                dt.timedelta(seconds=30), "reject")
    assert timed_out["timed_out"] and timed_out["by"] is None and timed_out["decision"] == "rejected"
    assert timed_out["reason"] == "no answer within 30s: the DAG's default (reject)"
    assert timed_out["timeout"] == "30s" and "timeout" not in approved  # for the console's job page


def test_the_operator_has_the_authors_default_timeout_and_approvers():
    task = operator(on_timeout="approve", approvers=("olivia", "omar"))
    assert task.options == ["Approve", "Reject"] and task.defaults == ["Approve"] and not task.multiple
    assert task.response_timeout == dt.timedelta(minutes=30) and task.execution_timeout is None
    assert task.assigned_users == [{"id": "olivia", "name": "olivia"}, {"id": "omar", "name": "omar"}]
    assert list(task.serialized_params) == ["reason"]
    assert operator().defaults == ["Reject"] and operator().assigned_users is None


def test_nobody_is_asked_unless_the_run_requires_it_and_the_gate_passed(monkeypatch):
    calls = []
    monkeypatch.setattr("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: calls.append(kw))
    ctx = context(require_approval=False)
    assert operator().execute(ctx) == {"asked": False, "approved": None, "decision": "not required"}
    assert ctx["ti"].xcom["decision"]["decision"] == "not required"
    gate_said_no = operator(decision={**DECISION, "passed": False})
    assert gate_said_no.execute(context(require_approval=True))["decision"] == "gate rejected"
    assert calls == []


@pytest.mark.parametrize("required, param", [(False, True), (True, False), (True, None)])
def test_a_run_that_requires_approval_waits_for_an_answer(monkeypatch, required, param):
    """The run param switches it on; the config's approval.required cannot be switched off by a trigger."""
    from airflow.sdk.exceptions import TaskAwaitingInput

    calls = []
    monkeypatch.setattr("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: calls.append(kw))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com")
    with pytest.raises(TaskAwaitingInput) as waiting:
        operator(required=required).execute(context(require_approval=param))
    assert waiting.value.timeout == dt.timedelta(minutes=30) and waiting.value.method_name == "execute_complete"
    (asked,) = calls
    assert asked["subject"] == "Promote churn-2? (loss 0.31 vs 0.4)"
    assert asked["options"] == ["Approve", "Reject"] and asked["defaults"] == ["Reject"]
    assert "| **`loss`** (minimize, the gate's objective) | 0.31 | 0.4 |" in asked["body"]
    assert "(https://airflow.example.com/training-jobs/ui/compare.html?job=" in asked["body"]
    assert list(asked["params"]) == ["reason"]


def test_an_answer_is_recorded_before_a_rejection_skips_the_promotion():
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    from operators.pipelines.retraining import PromoteModelOperator

    with _dag() as dag:
        task = operator()
        PromoteModelOperator(task_id="promote_model", decision=DECISION, upload=UPLOAD, job=JOB,
                             approval=task.output["decision"])
    olivia = {"id": "olivia", "name": "olivia"}
    ctx = {**context(), "task": dag.task_dict["approve_promotion"]}
    with pytest.raises(DownstreamTasksSkipped) as skipped:
        task.execute_complete(ctx, {"chosen_options": ["Reject"], "params_input": {"reason": "drift on segment B"},
                                    "responded_by_user": olivia, "responded_at": WHEN, "timedout": False})
    assert list(skipped.value.tasks) == ["promote_model"]
    assert ctx["ti"].xcom["decision"]["by"] == "olivia"
    assert ctx["ti"].xcom["decision"]["reason"] == "drift on segment B"
    ctx = {**context(), "task": dag.task_dict["approve_promotion"]}
    record = task.execute_complete(ctx, {"chosen_options": ["Approve"], "params_input": {}, "responded_at": WHEN,
                                         "responded_by_user": olivia})
    assert record["approved"] and ctx["ti"].xcom["decision"] == record


def test_a_rejected_model_is_never_promoted_and_an_approved_one_records_who(tmp_path):
    from airflow.sdk.exceptions import AirflowSkipException

    from operators.pipelines.retraining import PromoteModelOperator

    job = {"job_name": "churn-2", "base_job_name": "churn", "source_dir": str(tmp_path), "entry_point": "train.py",
           "output_path": str(tmp_path / "models")}
    rejected = {"asked": True, "approved": False, "by": "olivia", "reason": "drift", "decision": "rejected"}
    promote = PromoteModelOperator(task_id="promote_model", decision=DECISION, upload=UPLOAD, job=job,
                                   current=CURRENT, approval=rejected)
    with pytest.raises(AirflowSkipException, match=r"not promoted: rejected by olivia \(drift\); .*still names s3://b/"):
        promote.execute({"run_id": "r"})
    assert not (tmp_path / "models" / "churn" / "latest.json").exists()


def _ask(monkeypatch, task, triggered_by):
    from airflow.sdk.exceptions import TaskAwaitingInput

    calls = []
    monkeypatch.setattr("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: calls.append(kw))
    with pytest.raises(TaskAwaitingInput):
        task.execute(context(triggered_by, require_approval=True))
    return calls[0]


def test_the_triggering_user_is_never_among_the_approvers(monkeypatch):
    """Four eyes: the config's approvers less whoever triggered the run (Airflow lets only assigned users answer)."""
    asked = _ask(monkeypatch, operator(approvers=("alice", "olivia")), "alice")
    assert asked["assigned_users"] == [{"id": "olivia", "name": "olivia"}]
    assert asked["body"].endswith("Who may answer: `olivia`, not `alice` (who triggered this run).")
    scheduled = _ask(monkeypatch, operator(approvers=("alice", "olivia")), None)  # nobody triggered a scheduled run
    assert [u["id"] for u in scheduled["assigned_users"]] == ["alice", "olivia"]
    assert scheduled["body"].endswith("Who may answer: `alice`, `olivia`.")


def test_without_approvers_the_admins_role_answers(monkeypatch):
    monkeypatch.delenv("AIRFLOW__TRAINING__APPROVER_ROLE", raising=False)
    asked = _ask(monkeypatch, operator(), "alice")
    assert asked["assigned_users"] is None  # the API server checks the role (plugins/approval_check.py)
    assert asked["body"].endswith("Who may answer: a user with the role `op`, not `alice` (who triggered this run).")
    monkeypatch.setenv("AIRFLOW__TRAINING__APPROVER_ROLE", "admin")
    assert "a user with the role `admin`" in _ask(monkeypatch, operator(), "alice")["body"]


def test_a_run_whose_only_approver_triggered_it_fails_before_asking(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    calls = []
    monkeypatch.setattr("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: calls.append(kw))
    with pytest.raises(AirflowFailException, match=r"^approval.approvers names only alice, who triggered this run: a "
                                                   r"promotion is approved by another person; add another approver"):
        operator(approvers=("alice",)).execute(context("alice", require_approval=True))
    assert calls == []


def test_an_answer_of_the_triggering_user_is_a_refused_rejection():
    """The API server refuses it (plugins/approval_check.py); should one arrive all the same, nothing is promoted."""
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    from operators.pipelines.retraining import PromoteModelOperator

    with _dag():
        task = operator()
        PromoteModelOperator(task_id="promote_model", decision=DECISION, upload=UPLOAD, job=JOB,
                             approval=task.output["decision"])
    ctx = {**context("alice"), "task": task}
    with pytest.raises(DownstreamTasksSkipped) as skipped:
        task.execute_complete(ctx, {"chosen_options": ["Approve"], "params_input": {"reason": "mine is great"},
                                    "responded_by_user": {"id": "alice", "name": "alice"}, "responded_at": WHEN})
    assert list(skipped.value.tasks) == ["promote_model"]
    record = ctx["ti"].xcom["decision"]
    assert (record["approved"], record["decision"], record["by"]) == (False, "rejected", "alice")
    assert record["reason"].startswith("refused: alice triggered this run and cannot answer the approval")


def _dag():
    from airflow.sdk import DAG

    return DAG("retrain_churn", schedule=None, start_date=WHEN)


def test_the_template_puts_approval_between_the_gate_and_the_promotion():
    from operators.pipelines.retraining import retraining_dag

    config = RetrainingConfig(path="c.yaml", dag_id="retrain_c", job={"output_path": "s3://b/m", "source_dir":
                                                                      "s3://b/c/", "entry_point": "train.py"},
                              gate=GateRule("loss"), base_job_name="c",
                              approval=ApprovalRule(required=True, timeout=dt.timedelta(hours=4), on_timeout="approve",
                                                    approvers=("olivia",)))
    dag = retraining_dag(config)
    approve, promote = dag.task_dict["approve_promotion"], dag.task_dict["promote_model"]
    assert {"metric_gate", "current_model", "validate_spec", "upload_artifacts"} <= approve.upstream_task_ids
    assert "approve_promotion" in promote.upstream_task_ids and approve.downstream_task_ids == {"promote_model"}
    assert approve.required and approve.response_timeout == dt.timedelta(hours=4) and approve.defaults == ["Approve"]
    assert approve.assigned_users == [{"id": "olivia", "name": "olivia"}]
    assert dag.params["require_approval"] is True
    assert dag.params.get_param("require_approval").schema["type"] == "boolean"

    plain = retraining_dag(RetrainingConfig(**{**config.__dict__, "approval": ApprovalRule()}),
                           params={"data": "s3://b/d/"})
    assert plain.params["require_approval"] is False and plain.params["data"] == "s3://b/d/"
    assert plain.task_dict["approve_promotion"].defaults == ["Reject"]
    assert plain.task_dict["approve_promotion"].response_timeout == dt.timedelta(hours=24)
    assert "reason" not in plain.params  # the form's field is the task's own


def test_the_demo_dag_takes_its_data_and_output_from_the_trigger():
    import runpy
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    dag = runpy.run_path(str(repo / "dags" / "retraining_approval_demo.py"))["retrain_approval_demo"]
    assert dag.params["require_approval"] is False and dag.params["output_path"] == str(repo / "demo-bucket/approval")
    spec = dag.task_dict["validate_spec"].spec
    assert spec["inputs"] == {"train": "{{ params.data }}"} and spec["output_path"] == "{{ params.output_path }}"
    approve = dag.task_dict["approve_promotion"]
    assert approve.response_timeout == dt.timedelta(seconds=30) and approve.defaults == ["Reject"]

"""Approval before promotion, an option of the retraining template: a person looks at the candidate against the
promoted model and approves or rejects it, through Airflow's human-in-the-loop ApprovalOperator.

    metric_gate -> approve_promotion -> promote_model

A run asks only when it requires approval (the DAG param require_approval, or the config's approval.required, which a
trigger cannot switch off: the person triggering is not the one who approves) and the gate passed the model;
otherwise approve_promotion returns at once and promote_model decides as it always did. On Airflow 3.3 the asking
task waits in the awaiting_input state (no worker slot, no triggerer); an answer through the UI's Required actions or
PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/approve_promotion/-1/hitlDetails resumes it, and when the
timeout passes the scheduler answers with the DAG author's default. Approve: promote_model runs. Reject (a person, or
the default): promote_model is skipped and the pointer keeps the promoted model. The decision (who, why, when, timed
out or not) is the task's XCom; an approval is also recorded in the pointer.

Who may answer (four eyes): never the user who triggered the run, whatever the config's `approvers` say; the config's
`approvers` when it names some (Airflow's API server refuses everyone else: they are the task's assigned users), else
the users holding the role an admin names in [training] approver_role. The API server enforces both
(plugins/approval_check.py, in front of Airflow's answer route); this operator leaves the triggering user out of the
assigned users and, should an answer of theirs arrive all the same, records it as a refused rejection.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any, Mapping
from urllib.parse import urlencode

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param
from airflow.sdk.definitions.param import ParamsDict
from operators.airflow_compat import AirflowFailException

from operators.console_urls import PLUGIN_PREFIX, base_url, job_path
from operators.settings import approver_role

MAX_METRICS = 20  # a training may report any number of metrics: the body shows the objective and the first others


def compare_url(dag_id: str, run_id: str, current: Mapping[str, Any] | None) -> str:
    """The console's compare page of the candidate's job and the promoted model's (when the pointer names its run)."""
    jobs = [("job", job_path(dag_id, run_id, -1))]
    if current and current.get("dag_id") and current.get("run_id"):
        jobs.append(("job", job_path(current["dag_id"], current["run_id"], -1)))
    return f"{base_url()}{PLUGIN_PREFIX}/ui/compare.html?{urlencode(jobs)}"


def self_approval_refusal(responder: str | None, triggered_by: str | None) -> str | None:
    """The four-eyes rule, one line when `responder` may not answer the approval of a run `triggered_by` started
    (None for a scheduled or asset-triggered run: nobody is excluded); None when they may."""
    if not responder or not triggered_by or responder != triggered_by:
        return None
    return (f"refused: {responder} triggered this run and cannot answer the approval of its own promotion; another "
            "person approves it (the config's approval.approvers, else a user with the role [training] approver_role)")


def who_may_answer(approvers: tuple[str, ...] | list[str], role: str, triggered_by: str | None) -> str:
    """The body's line on who may answer (the API server enforces it: plugins/approval_check.py)."""
    who = ", ".join(f"`{a}`" for a in approvers) if approvers else f"a user with the role `{role}`"
    return f"Who may answer: {who}" + (f", not `{triggered_by}` (who triggered this run)" if triggered_by else "")


def duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def decision_record(event: Mapping[str, Any], timeout: timedelta, on_timeout: str) -> dict[str, Any]:
    """What the task records of an answer: a person's (who, why), or the timeout's default."""
    approved = list(event["chosen_options"]) == [ApprovalOperator.APPROVE]
    timed_out = bool(event.get("timedout"))
    reason = str((event.get("params_input") or {}).get("reason") or "").strip()
    if timed_out:
        reason = f"no answer within {duration(timeout)}: the DAG's default ({on_timeout})"
    record = {"asked": True, "approved": approved, "decision": "approved" if approved else "rejected",
              "by": (event.get("responded_by_user") or {}).get("name"), "reason": reason,
              "responded_at": event["responded_at"].isoformat(), "timed_out": timed_out}
    if timed_out:  # the console's job page says how long the run waited (training_console/jobs.py)
        record["timeout"] = duration(timeout)
    return record


def _code(text: Any) -> str:
    """Tenant text (metric names, reasons) as an inline code span that cannot break out of it or of a table cell."""
    return "`" + str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ")[:120] + "`"


def _value(value: Any) -> str:
    return "—" if value is None else f"{value:g}" if isinstance(value, (int, float)) else _code(value)


def approval_body(decision: Mapping[str, Any], current: Mapping[str, Any] | None, job_name: str, model_uri: str,
                  compare: str, on_timeout: str, timeout: timedelta, who: str = "") -> str:
    """The Markdown a person decides on: the gate's verdict, metrics side by side, both models, the compare link."""
    objective, ours = decision["objective"], dict(decision.get("metrics") or {})
    theirs = dict((current or {}).get("metrics") or {})
    names = [objective] + sorted(n for n in {*ours, *theirs} if n != objective)
    rows = [f"| **{_code(objective)}** ({decision['direction']}, the gate's objective) | {_value(ours.get(objective))} "
            f"| {_value(theirs.get(objective))} |"]
    rows += [f"| {_code(n)} | {_value(ours.get(n))} | {_value(theirs.get(n))} |" for n in names[1:MAX_METRICS]]
    if len(names) > MAX_METRICS:
        rows.append(f"| ... {len(names) - MAX_METRICS} more | | |")
    promoted = (f"`{current.get('model_uri')}` (job `{current.get('job_name')}`, promoted "
                f"{current.get('promoted_at', 'earlier')})" if current else "none yet: this would be the first")
    return "\n".join([
        f"The metric gate passed the candidate: {decision['reason']}.",
        "",
        "| metric | candidate | promoted model |",
        "| --- | --- | --- |",
        *rows,
        "",
        f"* Candidate: `{model_uri}` (job `{job_name}`)",
        f"* Promoted model: {promoted}",
        f"* [Compare the jobs]({compare}): curves, hyperparameters, spec",
        "",
        "**Approve** promotes the candidate (the latest-model pointer, the model Asset event, the MLflow model "
        "version). **Reject** keeps the promoted model; say why in *reason*. "
        f"No answer within {duration(timeout)}: **{on_timeout}** (the DAG's default).",
        *(["", who + "."] if who else []),
    ])


class PromotionApprovalOperator(ApprovalOperator):
    """Ask a person whether the candidate that passed the gate replaces the promoted model; XCom "decision":

        {"asked": true, "approved": false, "decision": "rejected", "by": "olivia", "reason": "...",
         "responded_at": "2026-...", "timed_out": false}

    (with "timeout": "24h" when nobody answered in time; "asked": false with "decision" "not required" / "gate
    rejected" when nobody was asked; also the return value, except after a rejection: ApprovalOperator then ends the
    task by skipping promote_model)."""

    template_fields = (*ApprovalOperator.template_fields, "decision", "current", "job", "upload")
    ui_color = "#ffe0b2"

    def __init__(self, *, decision: Any, current: Any, job: Any, upload: Any, required: bool = False,
                 timeout: timedelta = timedelta(hours=24), on_timeout: str = "reject", approvers=(), params=None,
                 **kwargs):
        # `params` arrive merged with the DAG's; HITLOperator keeps the task's own: the form's one field.
        params = copy.copy(params) if isinstance(params, ParamsDict) else ParamsDict(params or {})
        params["reason"] = Param("", type="string", title="Reason", source="task",
                                 description="Why (recorded with the decision; say it when you reject)")
        super().__init__(
            subject="Promote the retrained model?",
            defaults=self.APPROVE if on_timeout == "approve" else self.REJECT,
            response_timeout=timeout,
            assigned_users=[{"id": a, "name": a} for a in approvers] or None,
            params=params,
            **kwargs,
        )
        self.decision = decision
        self.current = current
        self.job = job
        self.upload = upload
        self.required = required
        self.on_timeout = on_timeout
        self.approvers = tuple(approvers)

    def execute(self, context) -> dict[str, Any] | None:
        if not (self.required or context["params"].get("require_approval")):
            return self._not_asked(context, "not required", "Approval not required for this run")
        if not self.decision["passed"]:  # promote_model skips it with the gate's reason
            return self._not_asked(context, "gate rejected", "Nobody asked: the metric gate rejected the model")
        triggered_by = _triggered_by(context)
        others = [a for a in self.approvers if a != triggered_by]
        if self.approvers:  # Airflow's API lets only the assigned users answer: never the triggering user
            if not others:
                raise AirflowFailException(
                    f"approval.approvers names only {triggered_by}, who triggered this run: a promotion is approved by "
                    "another person; add another approver to the retraining config")
            self.assigned_users = [{"id": a, "name": a} for a in others]
        job_name, model_uri = self.job["job_name"], self.upload["model_uri"]
        value, theirs = self.decision["value"], self.decision.get("current_value")
        versus = f" vs {theirs:g}" if isinstance(theirs, (int, float)) else ""
        self.subject = f"Promote {job_name}? ({self.decision['objective']} {value:g}{versus})"
        self.body = approval_body(self.decision, self.current, job_name, model_uri,
                                  compare_url(self.dag_id, context["run_id"], self.current), self.on_timeout,
                                  self.response_timeout,
                                  who_may_answer(others, approver_role(), triggered_by))
        self.log.info("Asking for approval of %s (after %s without an answer: %s)", model_uri,
                      duration(self.response_timeout), self.on_timeout)
        return super().execute(context)  # waits (awaiting_input) and resumes in execute_complete

    def _not_asked(self, context, decision: str, message: str) -> dict[str, Any]:
        self.log.info(message)
        record = {"asked": False, "approved": None, "decision": decision}
        context["ti"].xcom_push(key="decision", value=record)
        return record

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        if "error" in event:  # never with defaults (we always have one); HITLOperator raises it
            return super().execute_complete(context=context, event=event)
        # Checked and recorded first: on Reject, ApprovalOperator ends this task by skipping promote_model.
        self.validate_chosen_options(event["chosen_options"])
        self.validate_params_input(event["params_input"] or {})
        refused = self_approval_refusal((event.get("responded_by_user") or {}).get("name"), _triggered_by(context))
        if refused:  # the API server refuses this answer (plugins/approval_check.py); if one came all the same: no
            self.log.error("%s: the promotion is rejected", refused)
            event = {**event, "chosen_options": [self.REJECT], "params_input": {"reason": refused}}
        record = decision_record(event, self.response_timeout, self.on_timeout)
        context["ti"].xcom_push(key="decision", value=record)
        self.log.info("Promotion %s by %s%s", record["decision"], record["by"] or "nobody (the timeout's default)",
                      f": {record['reason']}" if record["reason"] else "")
        super().execute_complete(context=context, event=event)
        return record


def _triggered_by(context) -> str | None:
    """The user who triggered the run (Airflow's DagRun.triggering_user_name; None for a scheduled run)."""
    return getattr(context.get("dag_run"), "triggering_user_name", None) or None

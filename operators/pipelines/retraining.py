"""Scheduled incremental retraining: the metric gate, the promotion of a model, and the DAG template for one config.

    current_model -> validate_spec -> ... -> launch_training -> upload_artifacts -> publish_model
                  -> metric_gate -> approve_promotion -> promote_model (the "latest model" pointer + the model Asset event)

approve_promotion asks a person only in runs that require approval (operators/pipelines/approval.py); elsewhere it
passes at once.

The "latest model" pointer is one small JSON object at `<output_path>/<base_job_name>/latest.json`:

    {"model_uri": "s3://b/models/churn-20261121-030000-1a2b/output/model.tar.gz",
     "job_name": "churn-20261121-030000-1a2b", "metrics": {"loss": 0.31, ...},
     "objective": {"name": "loss", "direction": "minimize", "value": 0.31},
     "promoted_at": "2026-11-21T03:04:05+00:00", "dag_id": "retrain_churn", "run_id": "scheduled__...",
     "previous": {"model_uri": ..., "job_name": ..., "value": 0.35} | null,
     "approval": {"by": "olivia", "reason": "...", "responded_at": "..."}}   (only when a person approved it)

It names the model serving should use; only promote_model writes it (a single PUT, atomic on every store), and
only for a model that passed the gate. The lineage is the DAG's: every run of a retraining DAG is owned by
`dag:<dag_id>`, whoever triggered it (operators/jobspec/ownership.py), and current_model claims
`<output_path>/<base_job_name>/` for it (operators/state/owner_records.py), so no other owner's checkpoint_path or
output_path can write a pointer there; a pointer is followed only when it names this DAG and a model whose job area the
platform recorded as this DAG's run of this lineage. Each run resumes from the model it names (resume_from "latest" in a
retraining config means "the promoted model", never a rejected one); with no pointer yet, training starts fresh.
A model that fails the gate is still uploaded under its own job_name (for inspection) but is not promoted: the
pointer stays and no Asset event is emitted. Runs of one retraining DAG never overlap (max_active_runs=1), so two
promotions cannot race.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from airflow.sdk import DAG, Asset, AssetAll, AssetAny, BaseOperator, Param

from operators.airflow_compat import (
    AirflowFailException,
    AirflowSkipException,
    AssetOrTimeSchedule,
    CronTriggerTimetable,
)
from operators.jobspec.errors import SpecError
from operators.job_outputs import LATEST_POINTER, MODEL_IN_JOB_AREA, is_model_uri, latest_pointer_uri
from operators.jobspec.model import JobSpec
from operators.jobspec.ownership import OWNER_KEY, dag_owner
from operators.pipelines.approval import PromotionApprovalOperator
from operators.state.owner_records import OwnerRecord, claim, read_record
from operators.pipelines.template import TRANSFER_RETRIES, model_asset_for, training_job_tasks
from operators.tracking.mlflow import configured_uri, experiment_name, register_model_version, registered_model_name

if TYPE_CHECKING:
    from operators.pipelines.config_files import GateRule, RetrainingConfig

POINTER_NAME = LATEST_POINTER


def pointer_uri(output_path: str, base_job_name: str) -> str:
    return latest_pointer_uri(output_path, base_job_name)


class GateError(ValueError):
    """The gate cannot decide (the objective was not reported): a configuration problem, not a worse model."""


def is_better(value: float, reference: float, direction: str, by_more_than: float = 0.0) -> bool:
    improvement = reference - value if direction == "minimize" else value - reference
    return improvement > by_more_than


def evaluate_gate(rule: Mapping[str, Any], candidate_metrics: Mapping[str, Any],
                  current: Mapping[str, Any] | None) -> dict[str, Any]:
    """Decide whether the candidate may be promoted. `rule` is GateRule.to_dict(); `current` is the pointer (or None).

    Returns {"passed", "objective", "direction", "value", "threshold", "current_value", "current_model_uri",
    "reason"}; raises GateError when the candidate has no value for the objective."""
    objective, direction = rule["objective"], rule.get("direction", "minimize")
    value = candidate_metrics.get(objective)
    if value is None:
        reported = ", ".join(sorted(candidate_metrics)) or "none"
        raise GateError(f"metric gate: the training reported no {objective!r} (reported: {reported}); add a "
                        f"metric_definitions entry that matches it in the log, or write it to TRAINING_METRICS_FILE")
    value = float(value)
    reasons, passed = [], True
    threshold = rule.get("threshold")
    if threshold is not None:
        ok = value <= threshold if direction == "minimize" else value >= threshold
        passed &= ok
        reasons.append(f"{objective} {value:g} {'meets' if ok else 'misses'} the threshold {threshold:g} "
                       f"({'<=' if direction == 'minimize' else '>='})")
    current_value = ((current or {}).get("metrics") or {}).get(objective)
    if rule.get("better_than_current", True):
        if current is None:
            reasons.append("no promoted model yet: nothing to beat")
        elif current_value is None:
            reasons.append(f"the promoted model has no recorded {objective}: not compared")
        else:
            margin = float(rule.get("min_improvement") or 0.0)
            ok = is_better(value, float(current_value), direction, margin)
            passed &= ok
            by = f" by more than {margin:g}" if margin else ""
            reasons.append(f"{objective} {value:g} is {'better' if ok else 'not better'} than the promoted model's "
                           f"{float(current_value):g}{by}")
    return {"passed": bool(passed), "objective": objective, "direction": direction, "value": value,
            "threshold": threshold, "current_value": current_value,
            "current_model_uri": (current or {}).get("model_uri"), "reason": "; ".join(reasons)}


def _storage(connections: Mapping[str, str] | None):
    # lazy: storage client (botocore, awscrt, obstore), not at DAG parse
    from operators.storage.hook import ObjectStorageHook

    return ObjectStorageHook(connections=dict(connections or {}))


class CurrentModelOperator(BaseOperator):
    """Read the "latest model" pointer: returns it (or None when nothing was promoted yet) and pushes XCom
    "resume_from" (its model URI, or "" for none) for the run's job spec."""

    template_fields = ("output_path", "base_job_name", "connections")
    ui_color = "#fff3e0"

    def __init__(self, *, output_path: str, base_job_name: str, connections: Mapping[str, str] | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.output_path = output_path
        self.base_job_name = base_job_name
        self.connections = dict(connections or {})

    def execute(self, context) -> dict[str, Any] | None:
        storage = _storage(self.connections)
        uri = pointer_uri(self.output_path, self.base_job_name)
        owner = dag_owner(self.dag_id)
        lineage = f"{self.output_path.rstrip('/')}/{self.base_job_name}/"
        try:
            claim(storage, "output_path", lineage, OwnerRecord(owner, self.dag_id, self.base_job_name, "lineage",
                                                               run_id=context["run_id"]), self.log)
        except SpecError as err:
            raise AirflowFailException(f"the retraining lineage cannot be used: {err}") from None
        if not storage.exists(uri):
            self.log.info("No promoted model yet (%s does not exist): training starts fresh", uri)
            context["ti"].xcom_push(key="resume_from", value="")  # "" = no resume_from (a None XCom reads as missing)
            return None
        try:
            pointer = json.loads(storage.read_bytes(uri))
            model_uri = pointer["model_uri"]
        except (ValueError, KeyError, TypeError):
            raise AirflowFailException(f"the latest-model pointer {uri} is not a JSON object with model_uri; fix or "
                                       "delete it (deleting starts the next model fresh)") from None
        if not storage.exists(model_uri):
            raise AirflowFailException(f"the promoted model {model_uri} named by {uri} is gone; restore it, or delete "
                                       "the pointer to start fresh")
        suffix = "/" + MODEL_IN_JOB_AREA
        record = read_record(storage, model_uri[:-len(suffix)]) if is_model_uri(model_uri) else None
        if pointer.get("dag_id") != self.dag_id or pointer.get(OWNER_KEY) != owner or record is None \
                or (record.owner, record.kind, record.lineage) != (owner, "job", self.base_job_name):
            raise AirflowFailException(f"the latest-model pointer {uri} names {model_uri}, which the platform did not "
                                       f"record as a run of DAG {self.dag_id!r} in lineage {self.base_job_name!r}; a "
                                       "retraining resumes only from its own promoted models: delete the pointer to "
                                       "start fresh")
        self.log.info("Promoted model: %s (job %s, metrics %s); this run resumes from it", model_uri,
                      pointer.get("job_name"), pointer.get("metrics"))
        context["ti"].xcom_push(key="resume_from", value=model_uri)
        return pointer


class MetricGateOperator(BaseOperator):
    """Compare the new model's objective with a threshold and/or the promoted model; returns the decision.

    A rejected model is not an error: the decision says why, and promote_model is skipped (on_reject "skip"), or
    this task fails with the reason (on_reject "fail", for runs that must alert)."""

    template_fields = ("candidate", "current")
    ui_color = "#fce4ec"

    def __init__(self, *, rule: Mapping[str, Any], candidate: Any, current: Any = None, **kwargs):
        super().__init__(**kwargs)
        self.rule = dict(rule)
        self.candidate = candidate
        self.current = current

    def execute(self, context) -> dict[str, Any]:
        try:
            decision = evaluate_gate(self.rule, (self.candidate or {}).get("metrics") or {}, self.current)
        except GateError as err:
            raise AirflowFailException(str(err)) from None
        decision["metrics"] = dict((self.candidate or {}).get("metrics") or {})
        verdict = "PASSED" if decision["passed"] else "REJECTED"
        self.log.info("Metric gate %s: %s", verdict, decision["reason"])
        if not decision["passed"] and self.rule.get("on_reject") == "fail":
            raise AirflowFailException(f"metric gate rejected the model: {decision['reason']}")
        return decision


class PromoteModelOperator(BaseOperator):
    """Promote a model that passed the gate: write the pointer, emit the model Asset event, return the model URI.
    Skipped (pointer untouched, no event) when the gate rejected the model, or a person did (`approval`: the
    approve_promotion task's decision; a rejection skips this task already, this covers a cleared task)."""

    template_fields = ("decision", "upload", "job", "current", "approval")
    ui_color = "#c8e6c9"

    def __init__(self, *, decision: Any, upload: Any, job: Any, current: Any = None, model_asset=None,
                 approval: Any = None, **kwargs):
        if model_asset is not None:
            kwargs.setdefault("outlets", [model_asset])
        super().__init__(**kwargs)
        self.decision = decision
        self.upload = upload
        self.job = job
        self.current = current
        self.model_asset = model_asset
        self.approval = approval

    def execute(self, context) -> str:
        decision, spec = self.decision, JobSpec.from_dict(self.job)
        uri = pointer_uri(spec.output_path, spec.base_job_name or "")
        kept = (self.current or {}).get("model_uri") or "nothing (no model was promoted yet)"
        if not decision["passed"]:
            raise AirflowSkipException(f"not promoted: {decision['reason']}; {uri} still names {kept}")
        approval = self.approval or {}
        if approval.get("approved") is False:
            raise AirflowSkipException(f"not promoted: rejected by {approval.get('by') or 'the timeout'} "
                                       f"({approval.get('reason') or 'no reason given'}); {uri} still names {kept}")
        model_uri = self.upload["model_uri"]
        previous = self.current or None
        pointer = {
            "model_uri": model_uri,
            "job_name": spec.job_name,
            "metrics": decision.get("metrics", {}),
            "objective": {"name": decision["objective"], "direction": decision["direction"],
                          "value": decision["value"]},
            "promoted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "dag_id": self.dag_id,
            OWNER_KEY: dag_owner(self.dag_id),
            "run_id": context["run_id"],
            "previous": None if previous is None else {
                "model_uri": previous.get("model_uri"), "job_name": previous.get("job_name"),
                "value": (previous.get("objective") or {}).get("value")},
        }
        if approval.get("approved"):
            pointer["approval"] = {k: approval.get(k) for k in ("by", "reason", "responded_at", "timed_out")}
        _storage(spec.connections).write_bytes(uri, json.dumps(pointer, indent=2).encode())
        if self.model_asset is not None:
            context["outlet_events"][self.model_asset].extra = {
                "model_uri": model_uri, "job_name": spec.job_name, "metrics": pointer["metrics"],
                "pointer": uri, "run_id": context["run_id"],
            }
        self.log.info("Promoted %s: %s now names it (%s)", model_uri, uri, decision["reason"])
        self._register_in_mlflow(spec, model_uri, context["run_id"])
        return model_uri

    def _register_in_mlflow(self, spec, model_uri: str, run_id: str) -> None:
        """A version of the registered model named after the experiment, when [training] mlflow_tracking_uri is
        set (best effort: the pointer and the Asset event above are the promotion)."""
        uri = configured_uri()
        if uri:
            name = registered_model_name(spec.base_job_name, self.dag_id)
            register_model_version(uri, name=name, experiment=experiment_name(spec.base_job_name, self.dag_id),
                                   job_name=spec.job_name, model_uri=model_uri,
                                   run_id=run_id, logger=self.log)


# ---------------------------------------------------------------------------------------------------------------
# the DAG template


def schedule_for(config: RetrainingConfig):
    """cron -> CronTriggerTimetable; assets -> any/all of them; both -> AssetOrTimeSchedule; neither -> None."""
    condition = None
    if config.assets:
        assets = [Asset(name=a.name, uri=a.uri) for a in config.assets]
        condition = (AssetAny if config.asset_condition == "any" else AssetAll)(*assets)
    if config.cron and condition is not None:
        return AssetOrTimeSchedule(timetable=CronTriggerTimetable(config.cron, timezone="UTC"), assets=condition)
    if config.cron:
        return CronTriggerTimetable(config.cron, timezone="UTC")
    return condition


def approval_param(config: RetrainingConfig):
    """The run param that switches approval on (the config's approval.required is its default and cannot be undone)."""
    rule = config.approval
    return Param(rule.required, type="boolean", title="Require approval",
                 description="A person approves the promotion of the new model after the metric gate passes it "
                             f"(no answer in time: {rule.on_timeout})"
                             + (". Required for every run of this DAG." if rule.required else "."))


def retraining_dag(config: RetrainingConfig, *, model_asset=None, params: Mapping[str, Any] | None = None):
    """The DAG of one retraining config (operators/pipelines/config_files.py): builds it and returns it. `params`: more
    DAG params (for job fields written as templates, "{{ params.x }}"); require_approval is always one."""
    gate: GateRule = config.gate
    pointer = pointer_uri(config.job["output_path"], config.base_job_name)
    doc = (f"Retraining from `{config.path}`: resumes from the promoted model, gate `{gate.objective}` "
           f"({gate.direction}), pointer `{pointer}`.")
    with DAG(
        dag_id=config.dag_id,
        description=config.description,
        schedule=schedule_for(config),
        start_date=config.start_date,
        catchup=False,
        max_active_runs=1,  # each run builds on the previous one's promoted model
        # A schedule starts only when someone unpauses it: a fresh `make airflow` must not launch a run at once.
        is_paused_upon_creation=True,
        default_args={"retries": config.retries},
        tags=["training", "retraining", *config.tags],
        doc_md=doc,
        params={**dict(params or {}), "require_approval": approval_param(config)},
    ) as dag:
        job = dict(config.job)
        current = CurrentModelOperator(task_id="current_model", output_path=job["output_path"],
                                       base_job_name=config.base_job_name, connections=job.get("connections"))
        job["base_job_name"] = config.base_job_name
        if config.resume_latest:
            job["resume_from"] = current.output["resume_from"]
        # The config's retries apply to every task; the transfer stages keep at least their own.
        tasks = training_job_tasks(spec=job, transfer_retries=max(TRANSFER_RETRIES, config.retries), dag_owned=True)
        current >> tasks.validate
        gate_task = MetricGateOperator(task_id="metric_gate", rule=gate.to_dict(), candidate=tasks.launch.output,
                                       current=current.output)
        rule = config.approval
        approve = PromotionApprovalOperator(task_id="approve_promotion", decision=gate_task.output,
                                            current=current.output, job=tasks.validate.output,
                                            upload=tasks.upload.output, required=rule.required, timeout=rule.timeout,
                                            on_timeout=rule.on_timeout, approvers=rule.approvers)
        promote = PromoteModelOperator(task_id="promote_model", decision=gate_task.output, upload=tasks.upload.output,
                                       job=tasks.validate.output, current=current.output,
                                       approval=approve.output["decision"],
                                       model_asset=model_asset or model_asset_for(config.dag_id))
        tasks.publish >> gate_task >> approve >> promote
    return dag

"""Hyperparameter search: the operators, best-trial selection, the summary table, the trigger form and the DAG template.

Each trial is a full training job (the stage chain of operators/pipelines/template.py) with its own job_name
`<search job>-t<NN>` and its own artifacts under `<output_path>/<search job>-t<NN>/output/`. The search space and
the trials' hyperparameters come from operators/tuning/search_space.py; early stopping (the median and ASHA rules, the
TrialMonitor each trial's launch stage runs) is operators/tuning/early_stopping.py.

Why a mapped *task group* over the stage chain rather than one mapped "run a whole trial" operator: a trial then is
exactly a `training_job` run (same operators, same validation, same retries per stage, same artifacts), the grid view
shows where each trial is (staging data, training, uploading), and only the launch task, the one that uses the
machine, takes a concurrency slot. The price is more task instances (8 per trial) for the scheduler.

    plan_trials -> trial[i]: validate_spec -> ... -> launch_training -> upload_artifacts -> publish_model
                -> summarize (all_done) -> publish_best_model (the search's result + model Asset event)

Concurrency: at most airflow.cfg `[training] max_concurrent_trials` (default 2) trials of one search train at once
(max_active_tis_per_dagrun of the launch task), and, when `[training] trials_pool` names an Airflow pool, the launch
tasks of all searches share its slots (create it first: `airflow pools set training_trials 4 "search trials"`; a task
in a missing pool is never scheduled, so the default is no pool: default_pool). Both are read when the DAG file is
parsed: Airflow fixes pools and caps per task, not per run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Any, Iterable, Mapping, Sequence

from airflow.sdk import BaseOperator, Param, task_group
from operators.airflow_compat import AirflowFailException

from operators.job_outputs import search_summary_uri
from operators.jobspec.model import SpecError, base_name_from, job_name_from
from operators.launch.spec import validate_spec
from operators.pipelines.params import PARAM_SCHEMA_DIALECT, training_job_params
from operators.pipelines.template import training_job_tasks
from operators.settings import training_settings
from operators.tuning.early_stopping import EARLY_STOPPING_RULES, early_stopping_config, read_trial_report
from operators.tuning.search_space import (
    MAX_TRIALS,
    STRATEGIES,
    SearchError,
    generate_trials,
    parse_search_space,
    trial_job_name,
)

DIRECTIONS = ("minimize", "maximize")
TRIAL_GROUP = "trial"
SEARCH_PARAM_KEYS = ("objective", "direction", "search_space", "strategy", "max_trials", "seed", "early_stopping",
                     "early_stopping_min_trials", "early_stopping_grace_steps", "asha_reduction_factor")


# ---------------------------------------------------------------------------------------------------------------
# results


def trial_status(launch: Mapping | None, upload: Mapping | None, stopped: Mapping | None) -> str:
    if launch and launch.get("succeeded") and upload and upload.get("model_uri"):
        return "completed"
    if stopped:
        return "stopped_early"
    return "failed"


def select_best(rows: Iterable[Mapping[str, Any]], direction: str) -> Mapping[str, Any] | None:
    """The completed trial with the best objective value (ties: the earlier trial)."""
    candidates = [r for r in rows if r["status"] == "completed" and r.get("value") is not None]
    if not candidates:
        return None
    sign = 1 if direction == "minimize" else -1
    return min(candidates, key=lambda r: (sign * r["value"], r["index"]))


def format_table(rows: Sequence[Mapping[str, Any]], objective: str, best_index: int | None) -> str:
    """A plain-text table for the task log: trial, status, objective, each hyperparameter, model URI."""
    names: list[str] = []
    for r in rows:
        names.extend(n for n in r["params"] if n not in names)
    header = ["", "trial", "status", objective, *names, "model"]
    body = []
    for r in rows:
        value = r.get("value")
        body.append(["*" if r["index"] == best_index else "", r["job_name"], r["status"],
                     "-" if value is None else f"{value:.6g}", *(str(r["params"].get(n, "")) for n in names),
                     r.get("model_uri") or "-"])
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# the trigger form


def search_params(defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Params of a search DAG: the job spec's (shared by every trial) plus the search's own, in their own sections."""
    d = dict(defaults or {})
    params = training_job_params(defaults)
    params["job_name"] = Param(d.get("job_name"), type=["null", "string"], maxLength=58,
                               pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", section="Job",
                               description="Name of the search (DNS-1123); trial i is <job_name>-t<i>. Empty: "
                                           "<base_job_name>-<run time>.")
    params["hyperparameters"] = Param(d.get("hyperparameters", {}), type="object", section="Code",
                                      description="Hyperparameters every trial gets; search_space values override.")
    search, stopping = "Search", "Early stopping"
    params.update({
        "objective": Param(d.get("objective", "loss"), type="string", minLength=1, section=search,
                           description="Metric the search optimises: a metric_definitions Name (or a name the "
                                       "script writes to TRAINING_METRICS_FILE). Its last value is a trial's result."),
        "direction": Param(d.get("direction", "minimize"), type="string", enum=list(DIRECTIONS), section=search,
                           description="minimize (loss, error) or maximize (accuracy, AUC)."),
        "search_space": Param(d.get("search_space", {}), type="object", section=search,
                              description='Hyperparameter -> range: [v1, v2] grid values; {"type": "choice", '
                                          '"values": [...]}; {"type": "uniform"|"log_uniform", "min": a, "max": b} '
                                          '(+ "num": n for grid search); {"type": "int", "min": a, "max": b, "step": '
                                          '1}; a scalar is fixed.'),
        "strategy": Param(d.get("strategy", "random"), type="string", enum=list(STRATEGIES), section=search,
                          description="random: max_trials samples (grid values are all covered, round-robin); "
                                      "grid: every combination (must fit in max_trials)."),
        "max_trials": Param(d.get("max_trials", 8), type="integer", minimum=1, maximum=MAX_TRIALS, section=search,
                            description="Trial budget: the most training jobs this search runs."),
        "seed": Param(d.get("seed"), type=["null", "integer"], section=search,
                      description="Random seed of the sampling; empty: derived from the run id (stable on retry)."),
        "early_stopping": Param(d.get("early_stopping", "median"), type="string", enum=list(EARLY_STOPPING_RULES),
                                section=stopping,
                                description="median: stop a trial whose objective at step s is worse than the median "
                                            "of the other trials at step s; asha: successive halving at rung steps; "
                                            "none: every trial runs to the end."),
        "early_stopping_min_trials": Param(d.get("early_stopping_min_trials", 2), type="integer", minimum=1,
                                           section=stopping,
                                           description="Compare only once this many other trials reported the step."),
        "early_stopping_grace_steps": Param(d.get("early_stopping_grace_steps", 1), type="integer", minimum=0,
                                            section=stopping,
                                            description="Never stop before this step (asha: the first rung)."),
        "asha_reduction_factor": Param(d.get("asha_reduction_factor", 3), type="integer", minimum=2,
                                       section=stopping,
                                       description="asha: keep the best 1/factor at each rung; rungs are "
                                                   "grace_steps * factor^k."),
    })
    for param in params.values():  # the search's own Params too: draft 7's meta-schema check is the cheap one
        param.schema.setdefault("$schema", PARAM_SCHEMA_DIALECT)
    return params


# ---------------------------------------------------------------------------------------------------------------
# operators


def _search_job_name(params: Mapping[str, Any], dag_id: str, run_id: str, when) -> tuple[str, str]:
    base = params.get("base_job_name") or base_name_from(dag_id)
    suffix = f"{when:%Y%m%d-%H%M%S}-{hashlib.sha256(run_id.encode()).hexdigest()[:4]}"
    name = params.get("job_name") or job_name_from(base[:36].rstrip("-"), suffix)  # room for -tNNN
    if len(name) > 58:
        raise SearchError("job_name", f"{name!r} leaves no room for the -tNN trial suffix; use at most 58 characters")
    return base, name


class PlanSearchOperator(BaseOperator):
    """Check the search settings and the job spec, and write down every trial. Returns the trials' full job specs (what
    the trial group is mapped over: Airflow maps only over return values); XCom "plan" holds the search's settings and
    each trial's job_name and hyperparameters, XCom "early_stopping" the config every trial's launch stage gets.
    A bad setting fails here, naming the field."""

    ui_color = "#fdf6e3"

    def execute(self, context) -> list[dict[str, Any]]:
        params = dict(context["params"])
        settings = training_settings()
        try:
            when = context["dag_run"].run_after or context.get("logical_date")
            base, search_job = _search_job_name(params, self.dag_id, context["run_id"], when)
            objective = params.get("objective")
            if not isinstance(objective, str) or not objective:
                raise SearchError("objective", "is required: the name of the metric to optimise, e.g. loss")
            direction = params.get("direction") or "minimize"
            if direction not in DIRECTIONS:
                raise SearchError("direction", f"{direction!r} is not one of {', '.join(DIRECTIONS)}")
            seed = params.get("seed")
            if seed is None:
                seed = int(hashlib.sha256(context["run_id"].encode()).hexdigest()[:8], 16)
            space = parse_search_space(params.get("search_space"))
            trials = generate_trials(space, params.get("strategy") or "random", params.get("max_trials") or 8, seed)
            report_dir = os.path.join(settings.workspace, "searches", search_job)
            early_stopping = early_stopping_config(params, metric=objective, direction=direction,
                                                   report_dir=report_dir)
            base_spec = {k: v for k, v in params.items() if k not in SEARCH_PARAM_KEYS}
            fixed = dict(base_spec.get("hyperparameters") or {})
            specs = []
            for i, hps in enumerate(trials):
                raw = {**base_spec, "job_name": trial_job_name(search_job, i, len(trials)), "base_job_name": base,
                       "hyperparameters": {**fixed, **hps}}
                specs.append(validate_spec(raw, default_backend=settings.default_backend,
                                           default_layout=settings.default_layout).to_dict())
        except (SearchError, SpecError) as err:
            raise AirflowFailException(str(err)) from None
        if not any(m["Name"] == objective for m in specs[0]["metric_definitions"]):
            self.log.warning("objective %r is not a metric_definitions Name: trials must write it to "
                             "TRAINING_METRICS_FILE, or no trial will have a result", objective)
        shutil.rmtree(report_dir, ignore_errors=True)  # a re-planned search compares only its own trials
        os.makedirs(report_dir, exist_ok=True)
        plan = {
            "search_job": search_job,
            "objective": objective,
            "direction": direction,
            "strategy": params.get("strategy") or "random",
            "seed": seed,
            "output_path": specs[0]["output_path"],
            "connections": specs[0]["connections"],
            "report_dir": report_dir,
            "early_stopping": early_stopping,
            "trials": [{"index": i, "job_name": s["job_name"], "params": hps} for i, (s, hps) in
                       enumerate(zip(specs, trials))],
        }
        context["ti"].xcom_push(key="plan", value=plan)
        context["ti"].xcom_push(key="early_stopping", value=early_stopping)
        self.log.info("Search %s: %d trial(s), strategy %s (seed %s), %s %s, early stopping %s",
                      search_job, len(specs), plan["strategy"], seed, direction, objective, early_stopping["rule"])
        for t in plan["trials"]:
            self.log.info("  %s: %s", t["job_name"], json.dumps(t["params"]))
        return specs


class SearchSummaryOperator(BaseOperator):
    """After every trial (all_done): one row per trial (params, status, final objective, model URI), the best trial,
    the table in the log, `<output_path>/<search job>/search_summary.json`, and the summary as XCom."""

    template_fields = ("plan",)
    ui_color = "#e1bee7"

    def __init__(self, *, plan: Any, trial_group: str = TRIAL_GROUP, **kwargs):
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.plan = plan
        self.trial_group = trial_group

    def execute(self, context) -> dict[str, Any]:
        plan = self.plan
        if not plan:
            raise AirflowFailException("no trials ran: plan_trials failed (see its log)")
        ti = context["ti"]
        indexes = [t["index"] for t in plan["trials"]]
        launches = ti.xcom_pull(task_ids=f"{self.trial_group}.launch_training", map_indexes=indexes)
        uploads = ti.xcom_pull(task_ids=f"{self.trial_group}.upload_artifacts", map_indexes=indexes)
        objective, direction = plan["objective"], plan["direction"]
        rows = []
        for trial, launch, upload in zip(plan["trials"], launches, uploads):
            report = read_trial_report(plan["report_dir"], trial["job_name"], objective)
            status = trial_status(launch, upload, report["stopped"])
            value = (launch or {}).get("metrics", {}).get(objective) if status == "completed" else None
            if value is None and report["points"]:
                value = report["points"][-1][1]
            row = {"index": trial["index"], "job_name": trial["job_name"], "params": trial["params"],
                   "status": status, "value": value, "model_uri": (upload or {}).get("model_uri"),
                   "steps": len(report["points"])}
            if status == "stopped_early":
                row["stopped"] = report["stopped"]["reason"]
            elif status == "failed" and upload and upload.get("failure"):
                row["failure"] = upload["failure"].strip().splitlines()[-1][:300]
            rows.append(row)
        best = select_best(rows, direction)
        table = format_table(rows, objective, best["index"] if best else None)
        self.log.info("Search %s (%s %s):\n%s", plan["search_job"], direction, objective, table)
        counts = {s: sum(r["status"] == s for r in rows) for s in ("completed", "stopped_early", "failed")}
        summary = {"search_job": plan["search_job"], "objective": objective, "direction": direction,
                   "strategy": plan["strategy"], "seed": plan["seed"], "counts": counts, "trials": rows,
                   "best": best, "table": table}
        self._write_summary(plan, summary)
        if best is None:
            raise AirflowFailException(
                f"no trial of {plan['search_job']} completed with a value for {objective!r} "
                f"({counts['completed']} completed, {counts['stopped_early']} stopped early, {counts['failed']} "
                "failed); check the trials' logs and that metric_definitions match the objective")
        self.log.info("Best trial: %s %s=%g %s -> %s", best["job_name"], objective, best["value"],
                      json.dumps(best["params"]), best["model_uri"])
        return summary

    def _write_summary(self, plan: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
        # lazy: storage client (botocore, awscrt, obstore), not at DAG parse
        from operators.storage.hook import ObjectStorageHook

        uri = search_summary_uri(plan["output_path"], plan["search_job"])
        ObjectStorageHook(connections=plan.get("connections") or {}).write_bytes(
            uri, json.dumps(summary, indent=2).encode())
        self.log.info("Summary written to %s", uri)


class PublishBestModelOperator(BaseOperator):
    """The search's result: the best trial's model URI (XCom) and an event of the search's model Asset."""

    template_fields = ("summary",)
    ui_color = "#c8e6c9"

    def __init__(self, *, summary: Any, model_asset=None, **kwargs):
        if model_asset is not None:
            kwargs.setdefault("outlets", [model_asset])
        super().__init__(**kwargs)
        self.summary = summary
        self.model_asset = model_asset

    def execute(self, context) -> str:
        best = self.summary["best"]
        if self.model_asset is not None:
            context["outlet_events"][self.model_asset].extra = {
                "model_uri": best["model_uri"], "job_name": best["job_name"], "params": best["params"],
                "objective": self.summary["objective"], "value": best["value"], "run_id": context["run_id"],
            }
        self.log.info("Best model of %s: %s", self.summary["search_job"], best["model_uri"])
        return best["model_uri"]


# ---------------------------------------------------------------------------------------------------------------
# the template


def trial_concurrency() -> tuple[str | None, int]:
    """(pool, max concurrent trials of one search) from airflow.cfg [training] trials_pool / max_concurrent_trials."""
    settings = training_settings()
    return settings.trials_pool or None, settings.max_concurrent_trials


def hyperparameter_search_tasks(*, model_asset=None, pool: str | None = None, max_concurrent_trials: int = 2):
    """plan_trials -> trial (mapped task group: the training job stage chain) -> summarize -> publish_best_model.
    Call inside `with DAG(..., params=search_params())`; returns (plan, summary, publish_best)."""
    plan = PlanSearchOperator(task_id="plan_trials")
    launch_kwargs: dict[str, Any] = {"max_active_tis_per_dagrun": max_concurrent_trials}
    if pool:
        launch_kwargs["pool"] = pool

    @task_group(group_id=TRIAL_GROUP, tooltip="one training job per trial")
    def trial(spec):
        training_job_tasks(spec=spec, early_stopping=plan.output["early_stopping"], deferrable=False,
                           launch_kwargs=launch_kwargs)

    trials = trial.expand(spec=plan.output)
    summary = SearchSummaryOperator(task_id="summarize", plan=plan.output["plan"])
    trials >> summary
    best = PublishBestModelOperator(task_id="publish_best_model", summary=summary.output, model_asset=model_asset)
    summary >> best
    return plan, summary, best

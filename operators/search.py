"""Hyperparameter search: the search space, trial generation, early stopping, best-trial selection and the DAG template.

Each trial is a full training job (the stage chain of operators/template.py) with its own job_name
`<search job>-t<NN>` and its own artifacts under `<output_path>/<search job>-t<NN>/output/`.

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

Early stopping: while a trial trains, the launch stage hands each objective-metric point (from metric_definitions
matched in the log, or from the TRAINING_METRICS_FILE jsonl the script writes) to a `TrialMonitor`, which appends it
to `<workspace>/searches/<search job>/<trial job>.jsonl` (the workspace is shared by every worker) and compares it
with the other trials' points at the same step:
  median: stop when the value at step s (s >= grace_steps) is worse than the median of the other trials' values at
          step s, once at least min_trials other trials reported step s (SageMaker/Optuna median stopping).
  asha:   at rung steps r0 * eta^k (r0 = max(grace_steps, 1), eta = reduction_factor) a trial continues only if its
          value is among the best 1/eta of the values reported at that rung (asynchronous successive halving).
A stopped trial's processes are stopped, its launch task ends "skipped" (not failed), its metrics.json and the reason
are uploaded, and the search goes on. The rule needs points while the job runs, so trials launch non-deferrably.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import statistics
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from airflow.sdk import BaseOperator

STRATEGIES = ("random", "grid")
DIRECTIONS = ("minimize", "maximize")
EARLY_STOPPING_RULES = ("none", "median", "asha")
DOMAIN_TYPES = ("grid", "choice", "uniform", "log_uniform", "int")
MAX_TRIALS = 200
MAX_GRID_AXIS = 1000
TRIAL_GROUP = "trial"
SEARCH_PARAM_KEYS = ("objective", "direction", "search_space", "strategy", "max_trials", "seed", "early_stopping",
                     "early_stopping_min_trials", "early_stopping_grace_steps", "asha_reduction_factor")


class SearchError(ValueError):
    """A search setting is invalid; the message names the field and says what to do."""

    def __init__(self, field_name: str, problem: str):
        self.field = field_name
        super().__init__(f"search field '{field_name}': {problem}")


# ---------------------------------------------------------------------------------------------------------------
# the search space


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SearchError(where, f"must be a number, got {value!r}")
    return float(value)


def _tidy(x: float) -> float:
    """6 significant digits: sampled values read well in job names' summaries and as `--lr 0.0123457` arguments."""
    return float(f"{x:.6g}")


@dataclass(frozen=True)
class Domain:
    """One hyperparameter's range. `kind` is one of DOMAIN_TYPES, or "fixed" for a constant."""

    name: str
    kind: str
    values: tuple = ()
    low: float = 0.0
    high: float = 0.0
    step: int = 1
    num: int | None = None

    @property
    def crossed_in_random(self) -> bool:
        """Grid values are covered evenly even by random search (every value, round-robin); the rest is sampled."""
        return self.kind in ("grid", "fixed")

    def grid_values(self) -> list:
        if self.kind in ("grid", "choice", "fixed"):
            return list(self.values)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, self.step))
        if self.num is None:
            raise SearchError(f"search_space.{self.name}", f"a {self.kind} range has no grid points; add \"num\": N "
                              "(points from min to max) or use strategy random")
        if self.num == 1:
            return [_tidy(self.low)]
        if self.kind == "uniform":
            return [_tidy(self.low + (self.high - self.low) * i / (self.num - 1)) for i in range(self.num)]
        ratio = math.log(self.high / self.low)
        return [_tidy(self.low * math.exp(ratio * i / (self.num - 1))) for i in range(self.num)]

    def sample(self, rng: random.Random) -> Any:
        if self.kind in ("grid", "choice", "fixed"):
            return self.values[rng.randrange(len(self.values))]
        if self.kind == "int":
            return int(self.low) + self.step * rng.randrange((int(self.high) - int(self.low)) // self.step + 1)
        if self.kind == "uniform":
            return _tidy(rng.uniform(self.low, self.high))
        return _tidy(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))


def parse_domain(name: str, raw: Any) -> Domain:
    """`[v1, v2]` (grid values), a scalar (fixed), or {"type": grid|choice|uniform|log_uniform|int, ...}."""
    where = f"search_space.{name}"
    if isinstance(raw, list):
        raw = {"type": "grid", "values": raw}
    elif not isinstance(raw, Mapping):
        if isinstance(raw, (str, int, float, bool)) or raw is None:
            return Domain(name, "fixed", (raw,))
        raise SearchError(where, f"must be a list of values, a scalar or an object with \"type\", got {raw!r}")
    kind = raw.get("type")
    if kind not in DOMAIN_TYPES:
        raise SearchError(where, f"\"type\" must be one of {', '.join(DOMAIN_TYPES)}, got {kind!r}")
    allowed = {"grid": {"values"}, "choice": {"values"}, "uniform": {"min", "max", "num"},
               "log_uniform": {"min", "max", "num"}, "int": {"min", "max", "step"}}[kind]
    unknown = sorted(set(raw) - allowed - {"type"})
    if unknown:
        raise SearchError(where, f"unknown key {unknown[0]!r} for type {kind}; use {', '.join(sorted(allowed))}")
    if kind in ("grid", "choice"):
        values = raw.get("values")
        if not isinstance(values, list) or not values:
            raise SearchError(where, "\"values\" must be a non-empty list")
        for v in values:
            if isinstance(v, (dict, list)):
                raise SearchError(where, f"values must be JSON scalars, got {v!r}")
        return Domain(name, kind, tuple(values))
    if "min" not in raw or "max" not in raw:
        raise SearchError(where, f"a {kind} range needs \"min\" and \"max\"")
    low, high = _number(raw["min"], where + ".min"), _number(raw["max"], where + ".max")
    if low > high:
        raise SearchError(where, f"min {raw['min']} is greater than max {raw['max']}")
    if kind == "int":
        step = raw.get("step", 1)
        if low != int(low) or high != int(high):
            raise SearchError(where, "an int range needs integer min and max")
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise SearchError(where + ".step", f"must be an integer >= 1, got {step!r}")
        if (high - low) // step + 1 > MAX_GRID_AXIS:
            raise SearchError(where, f"more than {MAX_GRID_AXIS} values; raise step or narrow the range")
        return Domain(name, kind, low=low, high=high, step=step)
    if kind == "log_uniform" and low <= 0:
        raise SearchError(where + ".min", f"a log_uniform range needs min > 0, got {raw['min']}")
    num = raw.get("num")
    if num is not None and (isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= MAX_GRID_AXIS):
        raise SearchError(where + ".num", f"must be an integer from 1 to {MAX_GRID_AXIS}, got {num!r}")
    return Domain(name, kind, low=low, high=high, num=num)


def parse_search_space(raw: Any) -> list[Domain]:
    if not isinstance(raw, Mapping) or not raw:
        raise SearchError("search_space", 'must be a non-empty object, e.g. {"learning_rate": {"type": '
                          '"log_uniform", "min": 0.001, "max": 1}, "epochs": [5, 10]}')
    return [parse_domain(str(name), value) for name, value in raw.items()]


def generate_trials(space: Sequence[Domain], strategy: str, max_trials: int, seed: int) -> list[dict[str, Any]]:
    """The hyperparameters of each trial, in trial order; deterministic for a given seed."""
    if strategy not in STRATEGIES:
        raise SearchError("strategy", f"{strategy!r} is not one of {', '.join(STRATEGIES)}")
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or not 1 <= max_trials <= MAX_TRIALS:
        raise SearchError("max_trials", f"must be an integer from 1 to {MAX_TRIALS}, got {max_trials!r}")
    names = [d.name for d in space]
    if strategy == "grid":
        axes = [d.grid_values() for d in space]
        size = math.prod(len(a) for a in axes)
        if size > max_trials:
            raise SearchError("max_trials", f"the grid has {size} points but max_trials is {max_trials}; raise "
                              "max_trials, shrink the grid or use strategy random")
        return [dict(zip(names, combo)) for combo in itertools.product(*axes)]
    rng = random.Random(seed)
    crossed = [d for d in space if d.crossed_in_random]
    sampled = [d for d in space if not d.crossed_in_random]
    combos = [dict(zip([d.name for d in crossed], c)) for c in itertools.product(*(d.values for d in crossed))]
    trials: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(max_trials * 50):
        if len(trials) == max_trials:
            break
        params = dict(combos[len(trials) % len(combos)])
        params.update({d.name: d.sample(rng) for d in sampled})
        ordered = {n: params[n] for n in names}
        key = json.dumps(ordered, sort_keys=True)
        if key not in seen:  # a small discrete space runs out of new points before the budget does
            seen.add(key)
            trials.append(ordered)
    return trials


def trial_job_name(search_job: str, index: int, count: int) -> str:
    width = max(2, len(str(count)))
    return f"{search_job}-t{index + 1:0{width}d}"


# ---------------------------------------------------------------------------------------------------------------
# early stopping


def is_worse(value: float, reference: float, direction: str) -> bool:
    return value > reference if direction == "minimize" else value < reference


def median_rule(value: float, step: int, others: Sequence[float], *, direction: str, min_trials: int,
                grace_steps: int) -> str | None:
    """The stop reason, or None: worse than the median of the other trials' values at the same step."""
    if step < grace_steps or len(others) < max(1, min_trials):
        return None
    median = statistics.median(others)
    if is_worse(value, median, direction):
        return (f"median rule: {value:g} at step {step} is worse than the median {median:g} of "
                f"{len(others)} other trial(s) at that step")
    return None


def asha_rungs(grace_steps: int, reduction_factor: int, up_to: int) -> list[int]:
    rung, rungs = max(1, grace_steps), []
    while rung <= up_to:
        rungs.append(rung)
        rung *= reduction_factor
    return rungs


def asha_rule(value: float, step: int, others: Sequence[float], *, direction: str, min_trials: int,
              grace_steps: int, reduction_factor: int) -> str | None:
    """At rung steps, continue only within the best 1/reduction_factor of the values reported at that rung."""
    if step not in asha_rungs(grace_steps, reduction_factor, step) or len(others) < max(1, min_trials):
        return None
    ranked = sorted([*others, value], reverse=direction == "maximize")
    keep = max(1, len(ranked) // reduction_factor)
    cutoff = ranked[keep - 1]
    if is_worse(value, cutoff, direction):
        return (f"asha: {value:g} at rung step {step} is not among the best {keep} of {len(ranked)} trial(s) "
                f"at that rung (cutoff {cutoff:g})")
    return None


def early_stopping_config(params: Mapping[str, Any], *, metric: str, direction: str, report_dir: str) -> dict:
    """The primitive config the launch stage of every trial receives (see TrialMonitor)."""
    rule = params.get("early_stopping") or "none"
    if rule not in EARLY_STOPPING_RULES:
        raise SearchError("early_stopping", f"{rule!r} is not one of {', '.join(EARLY_STOPPING_RULES)}")

    def integer(name: str, default: int, minimum: int) -> int:
        value = params.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SearchError(name, f"must be an integer >= {minimum}, got {value!r}")
        return value

    return {
        "rule": rule,
        "metric": metric,
        "direction": direction,
        "report_dir": report_dir,
        "min_trials": integer("early_stopping_min_trials", 2, 1),
        "grace_steps": integer("early_stopping_grace_steps", 1, 0),
        "reduction_factor": integer("asha_reduction_factor", 3, 2),
    }


def _read_points(path: str, metric: str, offset: int = 0) -> tuple[list[tuple[int, float]], int]:
    """Complete lines appended after `offset` to a report or metrics jsonl file: [(step, value)], new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    points = []
    for line in data[:end].splitlines():
        try:
            point = json.loads(line)
            if point.get("name", metric) == metric and point.get("value") is not None:
                points.append((point.get("step"), float(point["value"])))
        except (ValueError, TypeError, AttributeError):
            continue
    return points, offset + end


class TrialMonitor:
    """One trial's side of early stopping: records its objective points in the search's report directory and decides,
    against the other trials' points there, whether it should stop. Thread-safe (log lines and a file poller call it).
    """

    def __init__(self, config: Mapping[str, Any], trial: str):
        self.config = dict(config)
        self.trial = trial
        self.metric = self.config["metric"]
        self.direction = self.config.get("direction", "minimize")
        self.rule = self.config.get("rule", "none")
        self.report_dir = self.config["report_dir"]
        self.own_path = os.path.join(self.report_dir, f"{trial}.jsonl")
        self.stopped_path = os.path.join(self.report_dir, f"{trial}.stopped.json")
        self.stop_reason: str | None = None
        self._lock = threading.Lock()
        self._seen_log_points = 0
        self._file_offset = 0
        self._file_points = 0
        self._others: dict[str, tuple[int, dict[int, float]]] = {}  # path -> (offset, step -> value)
        os.makedirs(self.report_dir, exist_ok=True)
        with open(self.own_path, "w"):
            pass  # a retried trial starts its report afresh
        if os.path.exists(self.stopped_path):
            os.unlink(self.stopped_path)

    # -- inputs ----------------------------------------------------------------------------------------------------
    def observe_collector(self, collector) -> str | None:
        """New points of the objective among the metrics matched in the log (operators/metrics.MetricCollector)."""
        points = collector.series.get(self.metric) or []
        with self._lock:
            new = points[self._seen_log_points:]
            self._seen_log_points = len(points)
            for point in new:
                self._observe(point["value"], point["step"])
            return self.stop_reason

    def poll_metrics_file(self, path: str) -> str | None:
        """New objective points the script appended to TRAINING_METRICS_FILE."""
        with self._lock:
            points, self._file_offset = _read_points(path, self.metric, self._file_offset)
            for step, value in points:
                if step is None:
                    step = self._file_points
                self._file_points += 1
                self._observe(value, int(step))
            return self.stop_reason

    # -- the rule ------------------------------------------------------------------------------------------------
    def _observe(self, value: float, step: int) -> None:
        if not math.isfinite(value):
            return
        with open(self.own_path, "a") as f:
            f.write(json.dumps({"name": self.metric, "step": step, "value": value}) + "\n")
        if self.stop_reason is not None or self.rule == "none":
            return
        others = self._other_values(step)
        common = {"direction": self.direction, "min_trials": int(self.config.get("min_trials", 2)),
                  "grace_steps": int(self.config.get("grace_steps", 1))}
        values = list(others.values())
        if self.rule == "median":
            reason = median_rule(value, step, values, **common)
        else:
            reason = asha_rule(value, step, values, reduction_factor=int(self.config.get("reduction_factor", 3)),
                               **common)
        if reason:
            self.stop_reason = reason
            decision = {"trial": self.trial, "rule": self.rule, "metric": self.metric, "step": step, "value": value,
                        "others": others, "reason": reason}
            tmp = self.stopped_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(decision, f)
            os.replace(tmp, self.stopped_path)

    def _other_values(self, step: int) -> dict[str, float]:
        """trial -> its value at `step`, for every other trial that reported that step (read incrementally)."""
        result = {}
        for name in sorted(os.listdir(self.report_dir)):
            path = os.path.join(self.report_dir, name)
            if not name.endswith(".jsonl") or path == self.own_path:
                continue
            offset, by_step = self._others.get(path, (0, {}))
            if os.path.getsize(path) < offset:  # that trial was retried: its report starts again
                offset, by_step = 0, {}
            points, offset = _read_points(path, self.metric, offset)
            for s, v in points:
                by_step[int(s)] = v
            self._others[path] = (offset, by_step)
            if step in by_step:
                result[name[: -len(".jsonl")]] = by_step[step]
        return result


def read_trial_report(report_dir: str, trial: str, metric: str) -> dict[str, Any]:
    """What a trial reported during training: its points and, if it was stopped early, the decision."""
    points, _ = _read_points(os.path.join(report_dir, f"{trial}.jsonl"), metric)
    stopped = None
    try:
        with open(os.path.join(report_dir, f"{trial}.stopped.json")) as f:
            stopped = json.load(f)
    except (OSError, ValueError):
        pass
    return {"points": [(int(s), v) for s, v in points if s is not None], "stopped": stopped}


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
    from airflow.sdk import Param

    from operators.params import training_job_params

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
    return params


# ---------------------------------------------------------------------------------------------------------------
# operators


def _search_job_name(params: Mapping[str, Any], dag_id: str, run_id: str, when) -> tuple[str, str]:
    import hashlib

    from operators.spec import base_name_from, job_name_from

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
        import hashlib
        import shutil

        from airflow.sdk.exceptions import AirflowFailException

        from operators.settings import training_settings
        from operators.spec import SpecError, validate_spec

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
        from airflow.sdk.exceptions import AirflowFailException

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
        from operators.hooks.object_storage import ObjectStorageHook

        uri = f"{plan['output_path'].rstrip('/')}/{plan['search_job']}/search_summary.json"
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
    from airflow.configuration import conf

    pool = (conf.get("training", "trials_pool", fallback="") or "").strip() or None
    raw = conf.get("training", "max_concurrent_trials", fallback="2") or "2"
    try:
        cap = int(raw)
        if cap < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"airflow.cfg [training] max_concurrent_trials must be an integer >= 1, got {raw!r}") from None
    return pool, cap


def hyperparameter_search_tasks(*, model_asset=None, pool: str | None = None, max_concurrent_trials: int = 2):
    """plan_trials -> trial (mapped task group: the training job stage chain) -> summarize -> publish_best_model.
    Call inside `with DAG(..., params=search_params())`; returns (plan, summary, publish_best)."""
    from airflow.sdk import task_group

    from operators.template import training_job_tasks

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

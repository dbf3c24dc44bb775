"""Early stopping of hyperparameter search trials: the median and ASHA rules, and each trial's TrialMonitor.

While a trial trains, the launch stage (operators/stages/launch_training.py) hands each objective-metric point (from
metric_definitions matched in the log, or from the TRAINING_METRICS_FILE jsonl the script writes) to a `TrialMonitor`,
which appends it to `<workspace>/searches/<search job>/<trial job>.jsonl` (the workspace is shared by every worker)
and compares it with the other trials' points at the same step:
  median: stop when the value at step s (s >= grace_steps) is worse than the median of the other trials' values at
          step s, once at least min_trials other trials reported step s (SageMaker/Optuna median stopping).
  asha:   at rung steps r0 * eta^k (r0 = max(grace_steps, 1), eta = reduction_factor) a trial continues only if its
          value is among the best 1/eta of the values reported at that rung (asynchronous successive halving).
A stopped trial's processes are stopped, its launch task ends "skipped" (not failed), its metrics.json and the reason
are uploaded, and the search goes on. The rule needs points while the job runs, so trials launch non-deferrably.
The decision is written next to the points (`<trial job>.stopped.json`); `read_trial_report` reads both back for the
search's summary. No Airflow import: the launch stage builds a monitor inside the running task.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
from typing import Any, Mapping, Sequence

from operators.fs.job_root import JobRoot, loads_strict
from operators.tracking.metrics import valid_point
from operators.tuning.search_space import SearchError

_JOB_ROOT_READ_BYTES = 16 * 1024 * 1024  # per poll; the rest is read at the next one

EARLY_STOPPING_RULES = ("none", "median", "asha")


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


def _read_points(path: str, metric: str, offset: int = 0, job_root: str | None = None
                 ) -> tuple[list[tuple[int | None, float]], int]:
    """Complete lines appended after `offset` to a report or metrics jsonl file: [(step, value)], new offset. A file
    below `job_root` (the tenant's metrics.jsonl) is read without following links, and only valid points count."""
    try:
        if job_root is None:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        else:
            root = JobRoot(job_root)
            with root.opened(root.relative(path)) as (f, st):
                if st.st_size < offset:  # the file was replaced: read it again from the start
                    offset = 0
                f.seek(offset)
                data = f.read(_JOB_ROOT_READ_BYTES)
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    points = []
    for line in data[:end].splitlines():
        try:
            point = loads_strict(line)
        except ValueError:
            continue
        if not isinstance(point, dict) or point.get("name", metric) != metric:
            continue
        valid = valid_point(metric, point)
        if valid is not None:
            points.append((valid["step"], valid["value"]))
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

    def poll_metrics_file(self, path: str, job_root: str | None = None) -> str | None:
        """New objective points the script appended to TRAINING_METRICS_FILE (below `job_root`: see _read_points)."""
        with self._lock:
            points, self._file_offset = _read_points(path, self.metric, self._file_offset, job_root)
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

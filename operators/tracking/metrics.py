"""Training metrics, as SageMaker and PAI define them: regexes matched against log lines as they stream.

Every match is kept as a time series point; `final()` is the last value of each metric. Scripts that would rather
write metrics themselves append JSON lines {"name": ..., "value": ..., "step": ...} to the file named by the
TRAINING_METRICS_FILE variable (<root>/output/metrics.jsonl); those points join the same series.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from training_runtime.contract import METRIC_LINE_PREFIX

from operators.fs.job_root import JobRoot, bounded_int, finite_number, loads_strict
from operators.jobspec.metric_regex import MAX_LINE_CHARS, MAX_MATCHES_PER_LINE, compile_metric_regex

log = logging.getLogger(__name__)

METRICS_READ_BYTES = 16 * 1024 * 1024  # the newest points of a larger file are kept
MAX_NAME_CHARS = 200
MAX_STEP = 2**53
# A line `train` echoed from the metrics stream (runtime/training_runtime/metrics_echo.py), as the log shows it: bare,
# or after the host's "[algo-2] " (operators/launch/log_stream.py).
ECHOED_LINE = re.compile(r"(?:\[[^\]\s]{1,100}\] )?" + re.escape(METRIC_LINE_PREFIX) + "(.*)")


# {"final", "series"} of a job whose job root Airflow cannot write (the kubernetes backend's cluster data plane): the
# launch task's XCom, recorded as the job trains (by the worker, or by the trigger while the task is deferred), where
# the training console's curves come from instead of output/metrics.json, and what upload_artifacts uploads as it.
METRIC_SERIES_KEY = "metric_series"
LIVE_SERIES_SECONDS = 10.0  # at most this often: each record rewrites the whole series through the API server


# What matching the tenant's expressions may cost the process that reads the log (the worker, or the triggerer): RE2
# bounds each search by the line's length (operators/jobspec/metric_regex.py), and this bounds their sum over a
# job's life: at most MATCH_CPU_SHARE of one CPU on average (after MATCH_GRACE_SECONDS of CPU). A job whose lines
# cost more gets the lines over budget shown but not matched, and one warning saying so.
MATCH_CPU_SHARE = 0.1
MATCH_GRACE_SECONDS = 2.0


class MatchBudget:
    """The CPU time (of the matching thread) spent on a job's expressions, against the budget of its wall time."""

    def __init__(self, share: float = MATCH_CPU_SHARE, grace: float = MATCH_GRACE_SECONDS, *,
                 cpu=time.thread_time, wall=time.monotonic):
        self.share, self.grace, self._cpu, self._wall = share, grace, cpu, wall
        self.started = wall()
        self.spent = 0.0
        self.skipped = 0  # lines not matched for want of budget

    def allows(self) -> bool:
        return self.spent <= self.grace + self.share * (self._wall() - self.started)

    def clock(self) -> float:
        return self._cpu()

    def charge(self, since: float) -> None:
        self.spent += max(0.0, self._cpu() - since)


# The runtime's samples of its hosts (runtime/training_runtime/system_metrics.py): system/<host>/<what>.
SYSTEM_METRICS_PREFIX = "system/"


def is_system_metric(name: str) -> bool:
    return name.startswith(SYSTEM_METRICS_PREFIX)


def valid_point(name: Any, point: Any) -> dict[str, Any] | None:
    """A point read from a job root as {"value", "step", "timestamp"}, or None when any part of it is not what a
    metric point is (a name that is not a short string, a value that is not a finite number, a negative or huge
    step, a timestamp that is not a finite number)."""
    try:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS or not isinstance(point, Mapping):
            return None
        value = finite_number(point["value"], "value")
        step = point.get("step")
        step = None if step is None else bounded_int(step, "step", low=0, high=MAX_STEP)
        timestamp = point.get("timestamp")
        timestamp = None if timestamp is None else finite_number(timestamp, "timestamp", low=0, high=1e11)
    except (KeyError, ValueError):
        return None
    return {"value": value, "step": step, "timestamp": timestamp}


class MetricCollector:
    """`echoed`: the log also carries the points of the metrics stream (the platform cannot read the job root and
    asked `train` to echo them: the kubernetes backend's cluster data plane); such a line is a point, not output."""

    def __init__(self, definitions: Iterable[Mapping[str, str]] = (), *, echoed: bool = False,
                 budget: MatchBudget | None = None):
        # RE2 (linear time), compiled as validate_spec checked them; an expression from before that check that RE2
        # refuses matches nothing (the job still runs), with one warning naming it.
        self._patterns = []
        for d in definitions:
            try:
                self._patterns.append((d["Name"], compile_metric_regex(d["Regex"])))
            except ValueError as err:
                log.warning("metric_definitions: %s: the Regex %s; it matches nothing", d.get("Name"), err)
        self.echoed = echoed
        self.budget = budget or MatchBudget()
        self.series: dict[str, list[dict[str, Any]]] = {}

    def add(self, name: str, value: float, step: int | None = None, timestamp: float | None = None) -> None:
        points = self.series.setdefault(name, [])
        points.append({
            "value": value,
            "step": len(points) if step is None else int(step),
            "timestamp": round(time.time() if timestamp is None else timestamp, 3),
        })

    def feed(self, line: str) -> bool:
        """Matches the line against the definitions; True when it was an echoed point (consumed: not the user's
        output, the caller does not show it)."""
        if self.echoed and (echoed := ECHOED_LINE.fullmatch(line)) is not None:
            self.add_json_point(echoed.group(1))
            return True
        text = line[:MAX_LINE_CHARS]  # RE2's time is linear in it: a line is matched in its first characters
        budget = self.budget
        for name, pattern in self._patterns:
            if not budget.allows():
                self._over_budget()
                break
            started = budget.clock()
            try:
                for count, match in enumerate(pattern.finditer(text), 1):
                    try:
                        value = float(match.group(1))
                    except (TypeError, ValueError):
                        continue
                    if math.isfinite(value):
                        self.add(name, value)
                    if count >= MAX_MATCHES_PER_LINE:
                        break
            finally:
                budget.charge(started)
        return False

    def _over_budget(self) -> None:
        self.budget.skipped += 1
        if self.budget.skipped == 1:
            log.warning("metric_definitions: matching this job's log took more than %d%% of a CPU: lines are shown "
                        "but not matched until it is back under (simpler expressions or shorter lines cost less; a "
                        "script may write its metrics to TRAINING_METRICS_FILE instead)", self.budget.share * 100)

    def add_json_point(self, text: str) -> None:
        """One point as the metrics stream holds it (a JSON object a line); the tenant's: an invalid one is skipped."""
        try:
            point = loads_strict(text)
        except (ValueError, RecursionError):  # RecursionError: a line of nested brackets
            return
        if isinstance(point, dict) and (valid := valid_point(point.get("name"), point)) is not None:
            self.add(point["name"], valid["value"], valid["step"], valid["timestamp"])

    def read_file(self, path: str | Path, *, job_root: str | None = None) -> None:
        """Points the script wrote itself (one JSON object per line; bad lines and invalid points are skipped). The
        file is the tenant's: read without following a link (below `job_root`, when given, else at its own name),
        only if it is a regular file, at most its last 16 MiB."""
        path = os.path.abspath(os.fspath(path))
        root = JobRoot(job_root or os.path.dirname(path))
        try:
            text = root.read_text(root.relative(path), METRICS_READ_BYTES, tail=True)
        except OSError:
            return
        for line in text.splitlines():
            self.add_json_point(line)

    def load_series(self, series: Any) -> None:
        """Series read back from a metrics.json (the job root's: every point is checked, invalid ones dropped)."""
        if not isinstance(series, Mapping):
            return
        for name, points in series.items():
            if not isinstance(points, list):
                continue
            kept = [p for p in (valid_point(name, point) for point in points[-100_000:]) if p is not None]
            if kept:
                self.series[name] = [{**p, "step": i if p["step"] is None else p["step"],
                                      "timestamp": p["timestamp"] or 0.0} for i, p in enumerate(kept)]

    def final(self) -> dict[str, float]:
        """The last value of each training metric: what the XCom, a search's objective and the list's columns show.
        System samples (CPU, memory, GPU per host) stay curves in the series, not results."""
        return {name: points[-1]["value"] for name, points in self.series.items()
                if points and not is_system_metric(name)}

    def to_json(self) -> dict[str, Any]:
        return {"final": self.final(), "series": self.series}

    def to_json_within(self, max_bytes: int) -> tuple[dict[str, Any], int]:
        """to_json() in at most `max_bytes` of JSON, and the stride it took: every series thinned to every stride-th
        point (its last one always kept), the stride doubled until it fits; the final values are never thinned."""
        stride = 1
        while True:
            data = {"final": self.final(),
                    "series": {name: points[::-stride][::-1] for name, points in self.series.items()}}
            if stride >= 2**20 or len(json.dumps(data, separators=(",", ":"))) <= max_bytes:
                return data, stride
            stride *= 2

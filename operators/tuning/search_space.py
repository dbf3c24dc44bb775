"""The search space of a hyperparameter search: parsing each hyperparameter's range and generating the trials.

A search space maps each hyperparameter to a range: `[v1, v2]` (grid values), a scalar (fixed), or an object
{"type": grid|choice|uniform|log_uniform|int, ...}. Strategy `grid` enumerates every combination (it must fit in
max_trials); strategy `random` samples max_trials points, deterministically for a seed, covering grid values evenly
(round-robin) and sampling the rest. Trial i of search job `<search job>` is named `<search job>-t<NN>`.

A bad setting raises SearchError, one line naming the field (`search_space.lr.min`, `max_trials`, ...).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

STRATEGIES = ("random", "grid")
DOMAIN_TYPES = ("grid", "choice", "uniform", "log_uniform", "int")
MAX_TRIALS = 200
MAX_GRID_AXIS = 1000


class SearchError(ValueError):
    """A search setting is invalid; the message names the field and says what to do."""

    def __init__(self, field_name: str, problem: str):
        self.field = field_name
        super().__init__(f"search field '{field_name}': {problem}")



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

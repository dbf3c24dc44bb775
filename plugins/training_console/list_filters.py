"""The list's filters beyond status, DAG and name (training_console/jobs.py applies them, server-side): tag, date
range and metric ranges. Parsed once from the query string; a filter that cannot be read is one line naming it and
what to write instead (the API answers 400 with it).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "=": operator.eq}
METRIC_RANGE = re.compile(r"^\s*(?P<name>[^<>=]+?)\s*(?P<op>>=|<=|==|>|<|=)\s*(?P<value>[^<>=]+?)\s*$")


class FilterError(ValueError):
    """A filter the list cannot apply: its message is the one line the user sees."""


@dataclass(frozen=True)
class MetricRange:
    name: str
    op: str
    value: float

    def matches(self, metrics: Mapping[str, Any]) -> bool:
        got = metrics.get(self.name)
        return isinstance(got, (int, float)) and not isinstance(got, bool) and OPERATORS[self.op](got, self.value)


@dataclass(frozen=True)
class ListFilters:
    tags: tuple[tuple[str, str | None], ...] = ()  # (name, value or None = any value)
    created_from: datetime | None = None
    created_to: datetime | None = None  # exclusive
    metrics: tuple[MetricRange, ...] = field(default=())

    def matches(self, row: Mapping[str, Any]) -> bool:
        tags = row.get("tags") or {}
        for name, value in self.tags:
            if name not in tags or (value is not None and tags[name] != value):
                return False
        if self.created_from or self.created_to:
            created = _instant(row.get("created"))
            if created is None or (self.created_from and created < self.created_from) or (
                    self.created_to and created >= self.created_to):
                return False
        return all(m.matches(row.get("metrics") or {}) for m in self.metrics)


def parse_filters(*, tags: Iterable[str] = (), created_from: str | None = None, created_to: str | None = None,
                  metrics: Iterable[str] = ()) -> ListFilters:
    """`tag=team:churn` or `tag=baseline`; `from` / `to` as ISO dates (a day is whole: to=2026-11-23 includes that
    day) or times; `metric=accuracy>=0.9` (>=, <=, >, <, =)."""
    return ListFilters(
        tags=tuple(_tag(t) for t in tags if t.strip()),
        created_from=_date("from", created_from, end_of_day=False),
        created_to=_date("to", created_to, end_of_day=True),
        metrics=tuple(_metric_range(m) for m in metrics if m.strip()),
    )


def _tag(text: str) -> tuple[str, str | None]:
    name, sep, value = text.strip().partition(":")
    if not name.strip():
        raise FilterError(f"tag filter {text!r} names no tag; write tag=<name> or tag=<name>:<value>")
    return name.strip(), value.strip() if sep else None


def _date(which: str, text: str | None, *, end_of_day: bool) -> datetime | None:
    if not text or not text.strip():
        return None
    text = text.strip()
    try:
        if len(text) == 10:  # a day: from its start, or (to) up to the start of the next
            day = datetime.fromisoformat(text).date()
            moment = datetime.combine(day + timedelta(days=1) if end_of_day else day, time(), timezone.utc)
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{which} date {text!r} is not a date; write YYYY-MM-DD or YYYY-MM-DDTHH:MM") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _metric_range(text: str) -> MetricRange:
    match = METRIC_RANGE.match(text)
    try:
        value = float(match.group("value")) if match else None
    except ValueError:
        value = None
    if match is None or value is None or value != value:
        raise FilterError(f"metric filter {text!r} is not a range; write <metric><op><number>, e.g. accuracy>=0.9 "
                          "(op one of >=, <=, >, <, =)")
    return MetricRange(match.group("name"), match.group("op"), value)


def _instant(iso: str | None) -> datetime | None:
    if not iso:
        return None
    moment = datetime.fromisoformat(iso)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)

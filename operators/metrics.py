"""Training metrics, as SageMaker and PAI define them: regexes matched against log lines as they stream.

Every match is kept as a time series point; `final()` is the last value of each metric. Scripts that would rather
write metrics themselves append JSON lines {"name": ..., "value": ..., "step": ...} to the file named by the
TRAINING_METRICS_FILE variable (<root>/output/metrics.jsonl); those points join the same series.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

METRICS_FILE = "output/metrics.jsonl"


class MetricCollector:
    def __init__(self, definitions: Iterable[Mapping[str, str]] = ()):
        self._patterns = [(d["Name"], re.compile(d["Regex"])) for d in definitions]
        self.series: dict[str, list[dict[str, Any]]] = {}

    def add(self, name: str, value: float, step: int | None = None, timestamp: float | None = None) -> None:
        points = self.series.setdefault(name, [])
        points.append({
            "value": value,
            "step": len(points) if step is None else int(step),
            "timestamp": round(time.time() if timestamp is None else timestamp, 3),
        })

    def feed(self, line: str) -> None:
        for name, pattern in self._patterns:
            for match in pattern.finditer(line):
                try:
                    value = float(match.group(1))
                except (TypeError, ValueError):
                    continue
                if math.isfinite(value):
                    self.add(name, value)

    def read_file(self, path: str | Path) -> None:
        """Points the script wrote itself (one JSON object per line; bad lines are skipped)."""
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            return
        for line in text.splitlines():
            try:
                point = json.loads(line)
                self.add(str(point["name"]), float(point["value"]), point.get("step"), point.get("timestamp"))
            except (ValueError, KeyError, TypeError):
                continue

    def final(self) -> dict[str, float]:
        return {name: points[-1]["value"] for name, points in self.series.items() if points}

    def to_json(self) -> dict[str, Any]:
        return {"final": self.final(), "series": self.series}

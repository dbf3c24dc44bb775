"""The compare page's data (GET /training-jobs/api/compare): several jobs side by side.

    ?job=<dag_id>/<run_id>/<map_index>   a job (each part URL-encoded; repeat for more jobs)
    ?run=<dag_id>/<run_id>               every job of a DAG run (all trials of a hyperparameter search)

Returns each job's summary, hyperparameters, spec fields, final metrics and metric series; the hyperparameters and
spec fields as rows with the differences marked; for a search, its objective; and the lineage rows (code digest, each
channel's data version, image and its digest, parent model, hyperparameters, from each job's kept lineage record:
training_console/lineage.py), the differences marked, "lineage_missing" naming the jobs that have no record. Only jobs of DAGs the user may
read are compared: any other key is answered as if it did not exist (its name says nothing about what exists).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import unquote

from fastapi import HTTPException

MAX_JOBS = 24
# The spec fields shown beside the hyperparameters (what makes two runs of the same code differ).
SPEC_FIELDS = ("base_job_name", "source_dir", "entry_point", "command", "inputs", "resume_from", "backend", "layout",
               "instance_count", "processes_per_host", "distribution", "resources", "image_uri", "max_run_seconds")


def parse_key(value: str, parts: int) -> tuple:
    """"a/b/c" (each part URL-encoded) -> its parts; 400 naming the parameter when it is not that shape."""
    split = [unquote(p) for p in value.split("/")]
    what = "job=<dag_id>/<run_id>/<map_index>" if parts == 3 else "run=<dag_id>/<run_id>"
    if len(split) != parts or not all(split):
        raise HTTPException(400, f"{value!r} is not {what} (each part URL-encoded)")
    if parts == 3:
        try:
            return split[0], split[1], int(split[2])
        except ValueError:
            raise HTTPException(400, f"{value!r}: the map index must be an integer ({what})") from None
    return tuple(split)


def select(job_keys: Iterable[str], run_keys: Iterable[str], readable: set[str],
           load: Callable[[str, str], list]) -> list:
    """The Job objects named by the query, in the order given, without duplicates; 404 for a key that names no job
    the user may read, 400 for too many."""
    chosen, seen = [], set()

    def add(job) -> None:
        key = (job.dag_id, job.run_id, job.map_index)
        if key not in seen:
            seen.add(key)
            chosen.append(job)

    for value in run_keys:
        dag_id, run_id = parse_key(value, 2)
        jobs = load(dag_id, run_id) if dag_id in readable else []
        if not jobs:
            raise HTTPException(404, f"no training job in DAG {dag_id!r} run {run_id!r} that you may read")
        for job in sorted(jobs, key=lambda j: j.map_index):
            add(job)
    for value in job_keys:
        dag_id, run_id, map_index = parse_key(value, 3)
        found = [j for j in (load(dag_id, run_id) if dag_id in readable else []) if j.map_index == map_index]
        if not found:
            raise HTTPException(404, f"no training job in DAG {dag_id!r} run {run_id!r} (map index {map_index}) "
                                     "that you may read")
        add(found[0])
    if len(chosen) > MAX_JOBS:
        raise HTTPException(400, f"{len(chosen)} jobs: compare at most {MAX_JOBS} at once")
    return chosen


def _same(values: list[Any]) -> bool:
    texts = {json.dumps(v, sort_keys=True, default=str) for v in values}
    return len(texts) <= 1


def rows(names: Iterable[str], values_of: Callable[[str], list[Any]]) -> list[dict[str, Any]]:
    return [{"name": name, "values": (values := values_of(name)), "differs": not _same(values)} for name in names]


def _objective(jobs: list) -> dict[str, str] | None:
    """The search's objective (its run's conf), when every job compared is a trial of searches with one objective."""
    found = set()
    for job in jobs:
        conf = job.conf if isinstance(job.conf, Mapping) else {}
        if not job.prefix or not isinstance(conf.get("objective"), str):
            return None
        found.add((conf["objective"], conf.get("direction") or "minimize"))
    if len(found) != 1:
        return None
    name, direction = found.pop()
    return {"name": name, "direction": direction}


def lineage_rows(records: list) -> list[dict[str, Any]]:
    """The lineage of each job (a LineageRecord, or None for a job without one) as rows, the differences marked."""
    if not any(records):
        return []

    def of(get: Callable[[Any], Any]) -> Callable[[str], list[Any]]:
        return lambda _name: [get(r) if r is not None else None for r in records]

    channels = sorted({name for r in records if r is not None for name in r.channels})
    hp_names = sorted({name for r in records if r is not None for name in r.hyperparameters})
    parent = (lambda r: r.parent.model_uri if r.parent else None)
    found = [*rows(["code digest"], of(lambda r: r.code.digest)),
             *rows(["code source"], of(lambda r: r.code.source_uri))]
    for channel in channels:
        found += rows([f"data version {channel}"],
                      of(lambda r, c=channel: r.channels[c].data_version if c in r.channels else None))
    found += [*rows(["image"], of(lambda r: r.image.name)), *rows(["image digest"], of(lambda r: r.image.digest)),
              *rows(["parent model"], of(parent))]
    for name in hp_names:
        found += rows([f"hyperparameter {name}"], of(lambda r, n=name: r.hyperparameters.get(n)))
    return found


def compare(jobs: list, now: datetime, metrics_of: Callable[[Any], dict[str, Any]],
            lineage_of: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """The response: `metrics_of(job)` is {"final", "series"} of one job (artifacts.metrics, after the path check);
    `lineage_of(job)` its kept LineageRecord or None (lineage.lineage_or_none)."""
    entries = []
    for job in jobs:
        summary = job.summary(now)
        measured = metrics_of(job)
        entries.append({**summary, "label": summary["job_name"] or job.run_id,
                        "hyperparameters": dict(job.spec.get("hyperparameters") or {}),
                        "fields": {name: job.spec.get(name) for name in SPEC_FIELDS},
                        "final": measured.get("final") or summary.get("metrics") or {},
                        "series": measured.get("series") or {}, "error": measured.get("error")})
    hp_names = sorted({name for e in entries for name in e["hyperparameters"]})
    metric_names = sorted({name for e in entries for name in e["final"]},
                          key=lambda n: (n.startswith("system/"), n))
    objective = _objective(jobs)
    final_rows = rows(metric_names, lambda n: [e["final"].get(n) for e in entries])
    for row in final_rows:  # the best value of the objective is marked (its direction is known)
        row["best"] = None
        if objective and row["name"] == objective["name"]:
            scored = [(v, i) for i, v in enumerate(row["values"]) if isinstance(v, (int, float))]
            if scored:
                pick = max if objective["direction"] == "maximize" else min
                row["best"] = pick(scored)[1]
    records = [lineage_of(job) for job in jobs] if lineage_of is not None else [None] * len(jobs)
    return {
        "jobs": entries,
        "lineage": lineage_rows(records),
        "lineage_missing": [e["label"] for e, r in zip(entries, records) if r is None],
        "hyperparameters": rows(hp_names, lambda n: [e["hyperparameters"].get(n) for e in entries]),
        "fields": rows(SPEC_FIELDS, lambda n: [e["fields"].get(n) for e in entries]),
        "final": final_rows,
        "objective": objective,
    }

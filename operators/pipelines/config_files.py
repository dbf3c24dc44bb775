"""Retraining job configs: one YAML file per scheduled retraining DAG (dags/configs/*.yaml).

Loading reads the files and checks them; nothing else (no object storage, no metadata DB), so DAG files that build
DAGs from configs stay fast to parse. A bad file raises `ConfigError` naming the file and the field:
    dags/configs/churn.yaml: field 'gate.direction': 'down' is not one of minimize, maximize

    dag_id: retrain_churn                 # default: retrain_<file name>
    description: Nightly churn model
    schedule:                             # neither: triggered by hand / the REST API only
      cron: "0 3 * * *"                   # a cron expression or @daily, @hourly, ...
      assets: [s3://bucket/churn/data/]   # a run when any of these Assets is updated (new data landed)
      asset_condition: any                # any | all (every asset updated since the last run)
    start_date: 2026-01-01
    tags: [churn]
    retries: 1                            # retries of every task (default 0; the launch and transfer stages have their own)
    job:                                  # a job spec (see docs/job-spec.md); no job_name: each run gets one
      base_job_name: churn
      source_dir: ../../examples/churn    # relative local paths are relative to this file
      ...
      resume_from: latest                 # the default: the promoted model (latest.json); null: start fresh
    gate:
      objective: loss                     # a metric of the training (metric_definitions / TRAINING_METRICS_FILE)
      direction: minimize                 # minimize | maximize
      threshold: 0.5                      # optional: must be at least this good
      better_than_current: true           # default true: must beat the promoted model
      min_improvement: 0.0                # ... by more than this
      on_reject: skip                     # skip (the run succeeds, promote_model is skipped) | fail
    approval:                             # optional: a person approves a promotion (operators/pipelines/approval.py)
      required: false                     # default false: the run param require_approval switches it on per run
      timeout: 24h                        # seconds, or 30s / 15m / 24h / 2d; default 24h
      on_timeout: reject                  # reject (the promoted model stays) | approve
      approvers: [olivia, omar]           # optional: only these users may answer (default: the users of the role
                                          # [training] approver_role, op); never the user who triggered the run
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml
from croniter import croniter

from operators.jobspec.model import SpecError, base_name_from
from operators.airflow_compat import CRON_PRESETS
from operators.launch.spec import validate_spec
from operators.settings import training_settings

DIRECTIONS = ("minimize", "maximize")
ON_REJECT = ("skip", "fail")
ASSET_CONDITIONS = ("any", "all")
TOP_LEVEL_KEYS = ("dag_id", "description", "schedule", "start_date", "tags", "retries", "job", "gate", "approval")
SCHEDULE_KEYS = ("cron", "assets", "asset_condition")
GATE_KEYS = ("objective", "direction", "threshold", "better_than_current", "min_improvement", "on_reject")
APPROVAL_KEYS = ("required", "timeout", "on_timeout", "approvers")
ON_TIMEOUT = ("reject", "approve")
DURATION = re.compile(r"^([0-9]+)\s*([smhd]?)$")
DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
PATH_KEYS = ("source_dir", "output_path", "checkpoint_path", "resume_from")
DAG_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")
DEFAULT_START_DATE = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


class ConfigError(ValueError):
    """A retraining config file is invalid; the message names the file, the field and what to do."""

    def __init__(self, path: str | os.PathLike, field_name: str, problem: str):
        self.path = str(path)
        self.field = field_name
        super().__init__(f"{path}: field '{field_name}': {problem}")


@dataclass(frozen=True)
class GateRule:
    """When a retrained model may replace the promoted one."""

    objective: str
    direction: str = "minimize"
    threshold: float | None = None
    better_than_current: bool = True
    min_improvement: float = 0.0
    on_reject: str = "skip"

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in GATE_KEYS}


@dataclass(frozen=True)
class ApprovalRule:
    """Whether a person approves a promotion, and what happens when nobody answers in time."""

    required: bool = False  # the default of the run param require_approval; true: every run asks, whatever it says
    timeout: dt.timedelta = dt.timedelta(hours=24)  # a run that waits blocks the next (max_active_runs=1)
    on_timeout: str = "reject"
    # user ids; () = the users of the role [training] approver_role. The user who triggered a run never answers its
    # approval, whatever this says (operators/pipelines/approval.py, plugins/approval_check.py).
    approvers: tuple[str, ...] = ()


@dataclass(frozen=True)
class AssetRef:
    name: str
    uri: str


@dataclass(frozen=True)
class RetrainingConfig:
    path: str
    dag_id: str
    job: Mapping[str, Any]
    gate: GateRule
    base_job_name: str
    description: str | None = None
    cron: str | None = None
    assets: tuple[AssetRef, ...] = ()
    asset_condition: str = "any"
    start_date: dt.datetime = DEFAULT_START_DATE
    tags: tuple[str, ...] = ()
    retries: int = 0
    resume_latest: bool = True
    approval: ApprovalRule = ApprovalRule()


def config_dir(default: str | os.PathLike) -> Path:
    """airflow.cfg [training] retraining_configs (or AIRFLOW__TRAINING__RETRAINING_CONFIGS), else `default`."""
    return Path(training_settings().retraining_configs or default)


def load_job_configs(directory: str | os.PathLike) -> list[RetrainingConfig]:
    """Every *.yaml / *.yml in `directory` (sorted), checked; a missing directory holds no configs."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    configs = [load_job_config(p) for p in files]
    seen: dict[str, str] = {}
    for config in configs:
        if config.dag_id in seen:
            raise ConfigError(config.path, "dag_id", f"{config.dag_id!r} is also the dag_id of {seen[config.dag_id]}; "
                                                     "give each config its own dag_id")
        seen[config.dag_id] = config.path
    return configs


def load_job_config(path: str | os.PathLike) -> RetrainingConfig:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(path, "(file)", f"cannot be read: {err.strerror}") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(path, "(file)", f"is not valid YAML{line}: {getattr(err, 'problem', err)}") from None
    return parse_job_config(raw, path)


def parse_job_config(raw: Any, path: str | os.PathLike) -> RetrainingConfig:
    path = Path(path)

    def fail(field_name: str, problem: str):
        raise ConfigError(path, field_name, problem)

    if not isinstance(raw, Mapping):
        fail("(file)", "must be a YAML mapping with at least 'job' and 'gate'")
    unknown = sorted(set(raw) - set(TOP_LEVEL_KEYS))
    if unknown:
        fail(unknown[0], f"is not a config field; known fields: {', '.join(TOP_LEVEL_KEYS)}")

    dag_id = raw.get("dag_id") or "retrain_" + re.sub(r"[^A-Za-z0-9_.\-]", "_", path.stem)
    if not isinstance(dag_id, str) or not DAG_ID.match(dag_id):
        fail("dag_id", f"{dag_id!r} may only use letters, digits, '_', '.', '-' (at most 200 characters)")
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        fail("description", "must be a string")

    schedule = raw.get("schedule") or {}
    if not isinstance(schedule, Mapping):
        fail("schedule", "must be a mapping with cron and/or assets")
    for key in schedule:
        if key not in SCHEDULE_KEYS:
            fail(f"schedule.{key}", f"is not a schedule field; use {', '.join(SCHEDULE_KEYS)}")
    cron = _cron(schedule.get("cron"), fail)
    assets = _assets(schedule.get("assets"), path, fail)
    asset_condition = schedule.get("asset_condition") or "any"
    if asset_condition not in ASSET_CONDITIONS:
        fail("schedule.asset_condition", f"{asset_condition!r} is not one of {', '.join(ASSET_CONDITIONS)}")

    start_date = _start_date(raw.get("start_date"), fail)
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        fail("tags", "must be a list of strings")
    retries = raw.get("retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        fail("retries", f"must be an integer >= 0, got {retries!r}")

    job = raw.get("job")
    if not isinstance(job, Mapping) or not job:
        fail("job", "is required: the job spec to retrain (source_dir, entry_point, inputs, output_path, ...)")
    job = dict(job)
    if job.get("job_name"):
        fail("job.job_name", "each run derives its own job_name (<base_job_name>-<run time>-<hash>); set "
                             "base_job_name instead")
    resume_latest = job.get("resume_from", "latest") == "latest"
    if "resume_from" not in job:
        job["resume_from"] = "latest"
    job = _resolve_local_paths(job, path.parent)
    base = job.get("base_job_name") or base_name_from(dag_id)
    try:
        validate_spec(job, default_job_name=f"{base}-config-check"[:63].rstrip("-"), default_base_job_name=base)
    except SpecError as err:
        fail(f"job.{err.field}", err.problem)

    return RetrainingConfig(
        path=str(path), dag_id=dag_id, job=job, gate=_gate(raw.get("gate"), fail), base_job_name=base,
        description=description, cron=cron, assets=assets, asset_condition=asset_condition, start_date=start_date,
        tags=tuple(tags), retries=retries, resume_latest=resume_latest, approval=_approval(raw.get("approval"), fail),
    )


def _cron(value: Any, fail) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        fail("schedule.cron", f"must be a cron expression string like '0 3 * * *', got {value!r}")
    if not croniter.is_valid(CRON_PRESETS.get(value, value)):
        fail("schedule.cron", f"{value!r} is not a cron expression (5 fields like '0 3 * * *', or @daily, @hourly, "
                              "...)")
    return value


def _assets(value: Any, path: Path, fail) -> tuple[AssetRef, ...]:
    if value in (None, []):
        return ()
    if not isinstance(value, list):
        fail("schedule.assets", "must be a list of Asset URIs / names, or of {name, uri} mappings")
    refs = []
    for i, item in enumerate(value):
        where = f"schedule.assets[{i}]"
        if isinstance(item, str) and item.strip():
            name = uri = item.strip()
        elif isinstance(item, Mapping) and (item.get("name") or item.get("uri")):
            unknown = sorted(set(item) - {"name", "uri"})
            if unknown:
                fail(f"{where}.{unknown[0]}", "an asset has only name and uri")
            name, uri = str(item.get("name") or item["uri"]), str(item.get("uri") or item["name"])
        else:
            fail(where, "must be an Asset URI or name (string), or a mapping with name and/or uri")
        if uri.startswith("airflow://"):
            fail(where, "the 'airflow' scheme is reserved by Airflow; use another URI")
        refs.append(AssetRef(name=name, uri=uri))
    return tuple(refs)


def _start_date(value: Any, fail) -> dt.datetime:
    if value in (None, ""):
        return DEFAULT_START_DATE
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc)
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
        except ValueError:
            pass
    fail("start_date", f"{value!r} is not a date (YYYY-MM-DD, or an ISO date-time)")


def _gate(value: Any, fail) -> GateRule:
    if not isinstance(value, Mapping):
        fail("gate", "is required: at least 'objective' (the metric the gate compares), e.g. gate: {objective: loss}")
    for key in value:
        if key not in GATE_KEYS:
            fail(f"gate.{key}", f"is not a gate field; use {', '.join(GATE_KEYS)}")
    objective = value.get("objective")
    if not isinstance(objective, str) or not objective:
        fail("gate.objective", "is required: the metric the gate compares, e.g. loss")
    direction = value.get("direction", "minimize")
    if direction not in DIRECTIONS:
        fail("gate.direction", f"{direction!r} is not one of {', '.join(DIRECTIONS)}")
    threshold = value.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        fail("gate.threshold", f"must be a number, got {threshold!r}")
    better = value.get("better_than_current", True)
    if not isinstance(better, bool):
        fail("gate.better_than_current", f"must be true or false, got {better!r}")
    improvement = value.get("min_improvement", 0.0)
    if isinstance(improvement, bool) or not isinstance(improvement, (int, float)) or improvement < 0:
        fail("gate.min_improvement", f"must be a number >= 0, got {improvement!r}")
    on_reject = value.get("on_reject", "skip")
    if on_reject not in ON_REJECT:
        fail("gate.on_reject", f"{on_reject!r} is not one of {', '.join(ON_REJECT)}")
    if threshold is None and not better:
        fail("gate", "passes every model: give a threshold, or leave better_than_current true")
    return GateRule(objective, direction, None if threshold is None else float(threshold), better,
                    float(improvement), on_reject)


def _approval(value: Any, fail) -> ApprovalRule:
    if value is None:
        return ApprovalRule()
    if not isinstance(value, Mapping):
        fail("approval", "must be a mapping, e.g. approval: {required: true, timeout: 4h, on_timeout: reject}")
    for key in value:
        if key not in APPROVAL_KEYS:
            fail(f"approval.{key}", f"is not an approval field; use {', '.join(APPROVAL_KEYS)}")
    required = value.get("required", False)
    if not isinstance(required, bool):
        fail("approval.required", f"must be true or false, got {required!r}")
    timeout = value.get("timeout", "24h")
    match = None if isinstance(timeout, bool) else DURATION.match(str(timeout).strip())
    if match is None or int(match.group(1)) <= 0:
        fail("approval.timeout", f"{timeout!r} is not a duration > 0: seconds, or a number with s, m, h or d (4h)")
    on_timeout = value.get("on_timeout", "reject")
    if on_timeout not in ON_TIMEOUT:
        fail("approval.on_timeout", f"{on_timeout!r} is not one of {', '.join(ON_TIMEOUT)}")
    approvers = value.get("approvers") or []
    if not isinstance(approvers, list) or not all(isinstance(a, str) and a.strip() for a in approvers):
        fail("approval.approvers", "must be a list of user ids (the names people log in to Airflow with)")
    seconds = int(match.group(1)) * DURATION_UNITS[match.group(2)]
    return ApprovalRule(required, dt.timedelta(seconds=seconds), on_timeout, tuple(a.strip() for a in approvers))


def _resolve_local_paths(job: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative local paths (no scheme) are relative to the config file, so a config works from any working dir."""

    def resolve(value: Any) -> Any:
        if not isinstance(value, str) or not value or "://" in value or value == "latest" or "{{" in value:
            return value
        if os.path.isabs(value):
            return value
        resolved = os.path.normpath(os.path.join(base.resolve(), value))
        return resolved + "/" if value.endswith("/") else resolved

    for key in PATH_KEYS:
        if key in job:
            job[key] = resolve(job[key])
    if isinstance(job.get("inputs"), Mapping):
        job["inputs"] = {channel: resolve(uri) for channel, uri in job["inputs"].items()}
    return job

"""The job spec: one validated, immutable description of a training job.

`validate_spec` is the only way in: it fills defaults, checks every field and raises `SpecError` whose message names
the field and says what to do. The validated spec travels between tasks as a plain dict (`JobSpec.to_dict`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

LAYOUTS = ("ti", "sagemaker", "pai", "modelarts")
BACKENDS = ("local", "kubernetes", "docker")
DISTRIBUTIONS = ("pytorch", "tensorflow", "mpi")
SCHEMES = ("s3", "cos", "oss", "obs")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
HYPERPARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
MAX_JOB_NAME = 63


class SpecError(ValueError):
    """A job spec field is invalid; the message names the field and what to do."""

    def __init__(self, field_name: str, problem: str):
        self.field = field_name
        super().__init__(f"job spec field '{field_name}': {problem}")


@dataclass(frozen=True)
class JobSpec:
    job_name: str
    source_dir: str
    output_path: str
    entry_point: str | None = None
    command: str | None = None
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, str] = field(default_factory=dict)
    checkpoint_path: str | None = None
    resume_from: str | None = None
    base_job_name: str | None = None
    instance_count: int = 1
    processes_per_host: int = 1
    resources: Mapping[str, Any] = field(default_factory=dict)
    image_uri: str | None = None
    layout: str = "ti"
    distribution: str | None = None
    backend: str = "local"
    max_run_seconds: int = 24 * 3600
    environment: Mapping[str, str] = field(default_factory=dict)
    connections: Mapping[str, str] = field(default_factory=dict)
    metric_definitions: tuple = ()
    kubernetes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def job_output_uri(self) -> str:
        """`<output_path>/<job_name>/output/`: where model.tar.gz, output.tar.gz, failure, metrics.json go."""
        return f"{self.output_path.rstrip('/')}/{self.job_name}/output/"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["metric_definitions"] = [dict(m) for m in self.metric_definitions]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["metric_definitions"] = tuple(values.get("metric_definitions") or ())
        return cls(**values)


def job_name_from(base: str, suffix: str) -> str:
    """A DNS-1123 job name `<base>-<suffix>`, lower-cased, truncated with a hash when longer than 63 characters."""
    raw = f"{base}-{suffix}" if suffix else base
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower())
    name = re.sub(r"-{2,}", "-", name).strip("-") or "job"
    if len(name) > MAX_JOB_NAME:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        name = name[: MAX_JOB_NAME - 9].rstrip("-") + "-" + digest
    return name


def base_name_from(dag_id: str) -> str:
    return job_name_from(dag_id, "")[:40].rstrip("-")


def _is_uri(value: str) -> bool:
    scheme = value.split("://", 1)[0] if "://" in value else ""
    return scheme in SCHEMES or scheme == "file" or scheme == ""


def _uri(spec: Mapping[str, Any], name: str, *, required: bool) -> str | None:
    value = spec.get(name)
    if value in (None, ""):
        if required:
            raise SpecError(name, "is required: give an object storage URI (s3://, cos://, oss://, obs://) or a local path")
        return None
    if not isinstance(value, str):
        raise SpecError(name, f"must be a string URI, got {type(value).__name__}")
    if not _is_uri(value):
        raise SpecError(name, f"{value!r} has an unsupported scheme; use s3://, cos://, oss://, obs://, file:// or a path")
    if "://" in value and value.split("://", 1)[0] in SCHEMES and not value.split("://", 1)[1].split("/", 1)[0]:
        raise SpecError(name, f"{value!r} names no bucket; write <scheme>://<bucket>/<prefix>")
    if any(part == ".." for part in value.replace("://", "/").split("/")):
        raise SpecError(name, f"{value!r} contains a '..' segment; give the path without it")
    return value


def _choice(spec, name, choices, default):
    value = spec.get(name)
    if value in (None, ""):
        return default
    if value not in choices:
        raise SpecError(name, f"{value!r} is not one of {', '.join(choices)}")
    return value


def _int(spec, name, default, minimum):
    value = spec.get(name)
    if value in (None, ""):
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().lstrip("-").isdigit():
        raise SpecError(name, f"must be an integer >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise SpecError(name, f"must be an integer >= {minimum}, got {value}")
    return value


def _mapping(spec, name) -> dict:
    value = spec.get(name)
    if value in (None, ""):
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(name, f"must be an object (JSON {{...}}), got {type(value).__name__}")
    return dict(value)


def _hyperparameters(spec) -> dict[str, Any]:
    hps = _mapping(spec, "hyperparameters")
    seen: dict[str, str] = {}
    for name, value in hps.items():
        where = f"hyperparameters.{name}" if name else "hyperparameters"
        if not name or not HYPERPARAMETER_NAME.match(name):
            raise SpecError(where, "names must start with a letter or '_' and use only letters, digits, '_', '.', '-'")
        if isinstance(value, (dict, list)):
            raise SpecError(where, "values must be JSON scalars (string, number, boolean or null)")
        sanitised = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
        if sanitised in seen:
            raise SpecError(where, f"clashes with '{seen[sanitised]}' (both become {sanitised}); rename one")
        seen[sanitised] = name
    return hps


def _inputs(spec) -> dict[str, str]:
    inputs = _mapping(spec, "inputs")
    for channel, uri in inputs.items():
        where = f"inputs.{channel}"
        if not CHANNEL_NAME.match(str(channel)):
            raise SpecError(where, "channel names may only use letters, digits, '_' and '-'")
        if channel == "model" and spec.get("resume_from"):
            raise SpecError(where, "the channel 'model' is reserved for resume_from; rename the channel")
        if not isinstance(uri, str) or not uri:
            raise SpecError(where, "must be a URI string (a prefix ending in / or a single object)")
        _uri({where: uri}, where, required=True)
    return inputs


def _resources(spec) -> dict[str, Any]:
    res = _mapping(spec, "resources")
    unknown = set(res) - {"cpu", "memory", "gpu"}
    if unknown:
        raise SpecError("resources", f"unknown keys {sorted(unknown)}; use cpu, memory, gpu")
    if "gpu" in res:
        res["gpu"] = _int(res, "gpu", 0, 0)
    if "cpu" in res and not re.match(r"^[0-9]+(\.[0-9]+)?m?$", str(res["cpu"])):
        raise SpecError("resources.cpu", f"{res['cpu']!r} is not a CPU quantity (e.g. 2, 0.5 or 500m)")
    if "memory" in res and not re.match(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$", str(res["memory"])):
        raise SpecError("resources.memory", f"{res['memory']!r} is not a memory quantity (e.g. 4Gi or 512Mi)")
    return res


def _metric_definitions(spec) -> tuple:
    value = spec.get("metric_definitions") or []
    if not isinstance(value, list):
        raise SpecError("metric_definitions", 'must be a list like [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]')
    result = []
    for i, item in enumerate(value):
        where = f"metric_definitions[{i}]"
        if not isinstance(item, Mapping) or not item.get("Name") or not item.get("Regex"):
            raise SpecError(where, 'needs "Name" and "Regex"')
        try:
            pattern = re.compile(item["Regex"])
        except re.error as err:
            raise SpecError(where, f"Regex does not compile: {err}") from None
        if pattern.groups < 1:
            raise SpecError(where, "Regex needs one capture group holding the value")
        result.append({"Name": str(item["Name"]), "Regex": str(item["Regex"])})
    return tuple(result)


def validate_spec(
    raw: Mapping[str, Any],
    *,
    default_job_name: str | None = None,
    default_base_job_name: str | None = None,
    default_backend: str = "local",
    default_layout: str = "ti",
) -> JobSpec:
    """Check a raw spec (Params, --conf or a config file) and return the JobSpec; raise SpecError naming the field."""
    if not isinstance(raw, Mapping):
        raise SpecError("(spec)", "must be a JSON object")
    spec = {k: v for k, v in raw.items() if v is not None and v != ""}
    known = {f.name for f in fields(JobSpec)}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise SpecError(unknown[0], f"is not a job spec field; known fields: {', '.join(sorted(known))}")

    base = spec.get("base_job_name") or default_base_job_name
    if base is not None and (not isinstance(base, str) or not DNS1123_LABEL.match(base) or len(base) > 50):
        raise SpecError("base_job_name", f"{base!r} must be lower-case letters, digits and '-', at most 50 characters")
    job_name = spec.get("job_name") or default_job_name
    if not job_name:
        raise SpecError("job_name", "is required (or let the DAG derive it from the run)")
    if not isinstance(job_name, str) or len(job_name) > MAX_JOB_NAME or not DNS1123_LABEL.match(job_name):
        raise SpecError(
            "job_name", f"{job_name!r} must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters"
        )

    entry_point, command = spec.get("entry_point"), spec.get("command")
    hyperparameters = _hyperparameters(spec)
    if entry_point and command:
        raise SpecError("command", "give either entry_point or command, not both")
    if not entry_point and not command and not any(k in hyperparameters for k in ("ti_program", "sagemaker_program")):
        raise SpecError("entry_point", "is required (a .py or .sh file in source_dir), or give a command")
    if entry_point is not None:
        if not isinstance(entry_point, str) or entry_point.startswith("/") or ".." in entry_point.split("/"):
            raise SpecError("entry_point", f"{entry_point!r} must be a relative path inside source_dir")
        if not entry_point.endswith((".py", ".sh")):
            raise SpecError("entry_point", f"{entry_point!r} must be a .py or .sh file; use command for anything else")

    resume_from = spec.get("resume_from")
    if resume_from is not None and resume_from != "latest":
        resume_from = _uri(spec, "resume_from", required=True)
        if not resume_from.endswith(".tar.gz"):
            raise SpecError("resume_from", f"{resume_from!r} must be 'latest' or the URI of a model.tar.gz")

    instance_count = _int(spec, "instance_count", 1, 1)
    distribution = _choice(spec, "distribution", DISTRIBUTIONS, None)
    backend = _choice(spec, "backend", BACKENDS, default_backend)
    environment = _mapping(spec, "environment")
    for key, value in environment.items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(key)) or not isinstance(value, (str, int, float, bool)):
            raise SpecError(f"environment.{key}", "names must be shell variable names and values scalars")
    connections = _mapping(spec, "connections")
    for scheme in connections:
        if scheme not in SCHEMES:
            raise SpecError(f"connections.{scheme}", f"keys are URI schemes: {', '.join(SCHEMES)}")
    return JobSpec(
        job_name=job_name,
        base_job_name=base,
        source_dir=_uri(spec, "source_dir", required=True),
        output_path=_uri(spec, "output_path", required=True),
        entry_point=entry_point,
        command=command,
        hyperparameters=hyperparameters,
        inputs=_inputs(spec),
        checkpoint_path=_uri(spec, "checkpoint_path", required=False),
        resume_from=resume_from,
        instance_count=instance_count,
        processes_per_host=_int(spec, "processes_per_host", 1, 1),
        resources=_resources(spec),
        image_uri=spec.get("image_uri"),
        layout=_choice(spec, "layout", LAYOUTS, default_layout),
        distribution=distribution,
        backend=backend,
        max_run_seconds=_int(spec, "max_run_seconds", 24 * 3600, 1),
        environment={k: str(v) for k, v in environment.items()},
        connections={k: str(v) for k, v in connections.items()},
        metric_definitions=_metric_definitions(spec),
        kubernetes=_mapping(spec, "kubernetes"),
    )

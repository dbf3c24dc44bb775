"""The job spec: one pydantic model (JobSpec) describing a training job, validated once in the first task.

`validate_spec` is the only way in: it fills the run's defaults, validates the model and raises `SpecError` whose
one-line message comes from the error's location (`resources.gpu: must be >= 0, got -1`). The same model generates
the trigger form's Params (operators/pipelines/params.py) and checks what a JSON schema cannot (name clashes, URI schemes,
regexes, cross-field rules). The validated spec travels between tasks as a plain dict (`JobSpec.to_dict`).

Each container backend's options section (`kubernetes`, `docker`) is a JSON object here: its model is the backend's
own (operators/launch/<backend>/options.py), above this layer, so the caller hands the models in (`option_models`,
from the launch registry: operators/launch/spec.py) and the section is validated by its model as a field of the spec.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError, ValidationInfo, field_validator, model_validator
from training_runtime.config import DISTRIBUTIONS as RUNTIME_DISTRIBUTIONS
from training_runtime.layouts import CONTAINER_ROOTS

from operators.job_outputs import job_output_uri
from operators.jobspec.errors import SpecError, detail_lines, first_error, problem_of
from operators.storage.location import DEFAULT_CONNECTIONS, SCHEME_HINT
from operators.storage.location import REMOTE_SCHEMES as SCHEMES
from operators.jobspec.credentials import looks_like_secret
from operators.jobspec.names import BACKENDS, CHANNEL_NAME, DNS1123_LABEL, MAX_JOB_NAME
from operators.jobspec.ownership import OWNER_KEY
from operators.jobspec.parts import (
    REFERENCE_FORMS,
    ConnectionRef,
    Count,
    DistributionOptions,
    MetricDefinition,
    Resources,
    Strict,
    VariableRef,
    json_text,
    spec_error,
)
from operators.jobspec.reproduces import Reproduces
from operators.jobspec.tags import normalise_tags

__all__ = ["JobSpec", "SpecError", "validate_spec", "job_name_from", "base_name_from"]

LAYOUTS = tuple(CONTAINER_ROOTS)  # the runtime's layouts
DISTRIBUTIONS = tuple(RUNTIME_DISTRIBUTIONS)
HYPERPARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Hyperparameters travel in environment variables (TM_HPS, PAI_USER_ARGS, ...) and on the command line; Linux
# refuses a single argument or variable over 128 KiB at exec time, after everything was staged.
MAX_HYPERPARAMETER_VALUE = 16 * 1024
MAX_HYPERPARAMETERS_JSON = 64 * 1024
MAX_ENV_VALUE = 32 * 1024


# The validation context's keys: the backends' options models (validate_spec's option_models), or the mark of a spec
# validated before (JobSpec.from_dict: the stages' XCom), whose sections are taken as they are.
OPTION_MODELS = "option_models"
VALIDATED = "validated"

Layout = Literal[LAYOUTS]
Backend = Literal[BACKENDS]
Distribution = Literal[DISTRIBUTIONS]
# The trigger form's dropdown labels (values_display).
LABELS = {
    "layout": {"ti": "TI-ONE (/opt/ml)", "sagemaker": "SageMaker (/opt/ml)", "pai": "PAI (/ml)",
               "modelarts": "ModelArts (/home/ma-user/modelarts)"},
    "backend": {"local": "Local processes on the worker", "kubernetes": "Kubernetes Job",
                "docker": "Docker containers"},
    "distribution": {"pytorch": "PyTorch (torchrun environment)", "tensorflow": "TensorFlow (TF_CONFIG)",
                     "mpi": "MPI / Horovod"},
}


def _uri(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        raise spec_error(f"must be a string URI, got {type(value).__name__}")
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in (*SCHEMES, "file", ""):
        raise spec_error(f"{value!r} has an unsupported scheme; use {SCHEME_HINT}, file:// or a path")
    if scheme in SCHEMES and not value.split("://", 1)[1].split("/", 1)[0]:
        raise spec_error(f"{value!r} names no bucket; write <scheme>://<bucket>/<prefix>")
    if any(part == ".." for part in value.replace("://", "/").split("/")):
        raise spec_error(f"{value!r} contains a '..' segment; give the path without it")
    return value


Uri = Annotated[str, AfterValidator(_uri)]


def _scalar(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        raise spec_error("values must be JSON scalars (string, number, boolean or null)")
    if isinstance(value, str) and len(value.encode()) > MAX_HYPERPARAMETER_VALUE:
        raise spec_error(f"is {len(value.encode())} bytes; values are limited to {MAX_HYPERPARAMETER_VALUE} bytes "
                         "(pass large data as an input channel)")
    return value


Scalar = Annotated[Any, AfterValidator(_scalar)]


def _env_value(value: Any) -> Any:
    if isinstance(value, dict):  # a secret by reference, resolved at launch (operators/jobspec/secret_refs.py)
        kind = VariableRef if "variable" in value else ConnectionRef if "connection" in value else None
        if kind is None:
            raise spec_error(f"is not a reference; give {REFERENCE_FORMS}")
        try:
            return kind.model_validate(value)
        except ValidationError as err:
            problem = err.errors(include_url=False)[0]
            raise spec_error(f"{'.'.join(map(str, problem['loc'])) or 'reference'}: {problem['msg']}; give "
                             f"{REFERENCE_FORMS}") from None
    if isinstance(value, list) or value is None:
        raise spec_error(f"names must be shell variable names and values scalars or references ({REFERENCE_FORMS})")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if len(text.encode()) > MAX_ENV_VALUE:
        raise spec_error(f"is {len(text.encode())} bytes; environment values are limited to {MAX_ENV_VALUE} bytes")
    return str(value)


EnvValue = Annotated[Any, AfterValidator(_env_value)]
Tags = Annotated[dict[str, str], BeforeValidator(normalise_tags)]


class JobSpec(Strict):
    """A training job (the training_job DAG's Params / --conf / a config file)."""

    job_name: str = Field(max_length=MAX_JOB_NAME, description="DNS-1123 name; the idempotency key (artifacts go "
                          "to <output_path>/<job_name>/). Empty: <base_job_name>-<run time>.",
                          json_schema_extra={"section": "Job", "pattern": DNS1123_LABEL.pattern})
    base_job_name: str | None = Field(None, max_length=50, description="Prefix of derived job names; resume_from "
                                      "'latest' searches it. Empty: the DAG id.", json_schema_extra={"section": "Job"})
    tags: Tags = Field(default_factory=dict, description='Labels to filter jobs by (and MLflow run tags): '
                       '["baseline"] or {"team": "churn"}.', json_schema_extra={"section": "Job"})
    source_dir: Uri = Field(description="Training code: a prefix, a .tar.gz object, a local dir or a local .tar.gz.",
                            json_schema_extra={"section": "Code"})
    entry_point: str | None = Field(None, max_length=1024, description="A .py or .sh file in source_dir; "
                                    "hyperparameters are passed as --name value.", json_schema_extra={"section": "Code"})
    command: str | None = Field(None, max_length=16 * 1024, description="Instead of entry_point: a shell command run "
                                "in the code dir, e.g. 'python train.py $PAI_USER_ARGS' (no implicit arguments).",
                                json_schema_extra={"section": "Code"})
    hyperparameters: dict[str, Scalar] = Field(default_factory=dict, description="name -> value (JSON scalars).",
                                               json_schema_extra={"section": "Code"})
    inputs: dict[str, Uri] = Field(default_factory=dict, description="channel -> URI; a prefix ending in / or a "
                                   "single object.", json_schema_extra={"section": "Data"})
    output_path: Uri = Field(description="Artifacts go to <output_path>/<job_name>/output/.",
                             json_schema_extra={"section": "Data"})
    checkpoint_path: Uri | None = Field(None, description="Synced with the checkpoint dir during training, restored "
                                        "before it.", json_schema_extra={"section": "Data"})
    resume_from: str | None = Field(None, description="Incremental training: 'latest' (newest successful model of "
                                    "base_job_name among your own runs) or the URI of a model.tar.gz; given as input channel 'model'.",
                                    json_schema_extra={"section": "Data"})
    connections: dict[str, str] = Field(default_factory=dict, description="URI scheme -> Airflow connection id "
                                        f"(defaults {', '.join(DEFAULT_CONNECTIONS.values())}).",
                                        json_schema_extra={"section": "Data"})
    instance_count: Count = Field(1, ge=1, le=256, description="Hosts.", json_schema_extra={"section": "Resources"})
    processes_per_host: Count = Field(1, ge=1, le=64, description="Processes per host (distribution pytorch or mpi).",
                                      json_schema_extra={"section": "Resources"})
    distribution: Distribution | DistributionOptions | None = Field(
        None, description='Launcher environment for several hosts/processes: pytorch, tensorflow, mpi, or elastic '
        'PyTorch: {"torch_distributed": {"elastic": {"min_hosts": 2, "max_hosts": 4, "max_restarts": 3}}}.',
        json_schema_extra={"section": "Resources"})
    resources: Resources = Field(default_factory=Resources, description="Per host: cpu, memory, gpu.",
                                 json_schema_extra={"section": "Resources"})
    backend: Backend = Field("local", description="Where it runs; empty: airflow.cfg [training] default_backend.",
                             json_schema_extra={"section": "Resources"})
    image_uri: str | None = Field(None, max_length=512, description="Training image (kubernetes, docker); empty: "
                                  "[training] default_image.", json_schema_extra={"section": "Resources"})
    layout: Layout = Field("ti", description="Directory layout inside the container; empty: [training] default_layout.",
                           json_schema_extra={"section": "Resources"})
    max_run_seconds: Count = Field(24 * 3600, ge=1, le=28 * 24 * 3600, description="Hard limit; the job is stopped "
                                   "and the task fails.", json_schema_extra={"section": "Resources"})
    environment: dict[str, EnvValue] = Field(
        default_factory=dict, description="Extra environment variables for the training script: a value, or a secret "
        'by reference, read at launch: {"variable": "<key>"} or {"connection": "<id>", "field": "password"}.',
        json_schema_extra={"section": "Resources"})
    metric_definitions: list[MetricDefinition] = Field(default_factory=list, max_length=64, description="Metrics "
                                                       "read from the log.", json_schema_extra={"section": "Job"})
    # Each holds what the job set, as its backend's launcher receives it (the model's launch_options()).
    kubernetes: dict[str, Any] = Field(default_factory=dict, description="Per-job Kubernetes options (backend "
                                       "kubernetes).", json_schema_extra={"section": "Resources"})
    docker: dict[str, Any] = Field(default_factory=dict, description="Per-job Docker options (backend docker).",
                                   json_schema_extra={"section": "Resources"})
    reproduces: Reproduces | None = Field(
        None, description="Set by Reproduce (the console, `training-job reproduce`): the run this job reproduces and "
        "the code digest, data versions and image digest it must run again.", json_schema_extra={"section": "Reproduce"})

    # ---- single fields --------------------------------------------------------------------------------------
    @field_validator("job_name", "base_job_name")
    @classmethod
    def _dns_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not DNS1123_LABEL.match(value):
            limit = 63 if info.field_name == "job_name" else 50
            raise spec_error(f"{value!r} must be a DNS-1123 label: lower-case letters, digits and '-', at most "
                             f"{limit} characters")
        return value

    @field_validator("entry_point")
    @classmethod
    def _entry_point(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.startswith("/") or ".." in value.split("/"):
            raise spec_error(f"{value!r} must be a relative path inside source_dir")
        if not value.endswith((".py", ".sh")):
            raise spec_error(f"{value!r} must be a .py or .sh file; use command for anything else")
        return value

    @field_validator("resume_from")
    @classmethod
    def _resume_from(cls, value: str | None) -> str | None:
        if value is None or value == "latest":
            return value
        _uri(value)
        if not value.endswith(".tar.gz"):
            raise spec_error(f"{value!r} must be 'latest' or the URI of a model.tar.gz")
        return value

    @field_validator("distribution", mode="before")
    @classmethod
    def _distribution(cls, value: Any) -> Any:
        # One line naming the field, rather than the errors of both forms of the union.
        if value is None or isinstance(value, DistributionOptions):
            return value
        if isinstance(value, str):
            if value not in DISTRIBUTIONS:
                raise spec_error(f"{json_text(value)} is not one of {', '.join(DISTRIBUTIONS)} (or the object "
                                 '{"torch_distributed": {"elastic": {...}}})')
            return value
        if not isinstance(value, dict):
            raise spec_error(f"must be one of {', '.join(DISTRIBUTIONS)} or an object, got {json_text(value)}")
        try:
            return DistributionOptions.model_validate(value)
        except ValidationError as err:
            errors = err.errors(include_url=False)
            # An unknown key first: {"pytorchddp": {...}} is a misspelt key more than a missing torch_distributed.
            error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
            field, problem = problem_of({**error, "loc": ("distribution", *error["loc"])}, JobSpec)
            raise spec_error(problem, field) from None

    @field_validator("kubernetes", "docker")
    @classmethod
    def _backend_options(cls, section: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        context = info.context or {}
        models = context.get(OPTION_MODELS)
        if models is None:
            if not context.get(VALIDATED):  # a raw spec whose backend options nobody would check: a caller's bug
                raise TypeError("a raw job spec is validated with operators.launch.spec.validate_spec")
            # A spec validated before (JobSpec.from_dict): its sections hold what the job set. One an earlier release
            # validated lists every option, an unset one as null, which no launcher reads as unset.
            return {key: value for key, value in section.items() if value is not None}
        model = models[info.field_name]
        try:
            return model.model_validate(section).launch_options()
        except ValidationError as err:
            errors, within = err.errors(include_url=False), (info.field_name,)
            field, problem = problem_of(errors[0], model, within)
            raise spec_error(problem, field, detail_lines(errors, within)) from None

    @field_validator("hyperparameters")
    @classmethod
    def _hyperparameters(cls, hps: dict[str, Any]) -> dict[str, Any]:
        seen: dict[str, str] = {}
        for name in hps:
            where = f"hyperparameters.{name}" if name else "hyperparameters"
            if not name or not HYPERPARAMETER_NAME.match(name):
                raise spec_error("names must start with a letter or '_' and use only letters, digits, '_', '.', '-'",
                                 where)
            sanitised = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
            if sanitised in seen:
                raise spec_error(f"clashes with '{seen[sanitised]}' (both become {sanitised}); rename one", where)
            seen[sanitised] = name
        size = len(json.dumps(hps).encode())
        if size > MAX_HYPERPARAMETERS_JSON:
            raise spec_error(f"take {size} bytes as JSON; at most {MAX_HYPERPARAMETERS_JSON} (pass large data as an "
                             "input channel)")
        return hps

    @field_validator("inputs")
    @classmethod
    def _inputs(cls, inputs: dict[str, str]) -> dict[str, str]:
        for channel in inputs:
            if not CHANNEL_NAME.match(channel):
                raise spec_error("channel names may only use letters, digits, '_' and '-'", f"inputs.{channel}")
        return inputs

    @field_validator("environment")
    @classmethod
    def _environment(cls, env: dict[str, Any]) -> dict[str, Any]:
        for key, value in env.items():
            if not ENV_NAME.match(key):
                raise spec_error("names must be shell variable names and values scalars", f"environment.{key}")
            if isinstance(value, str) and looks_like_secret(key, value):
                # Never echo the value: it is the secret.
                raise spec_error(f"looks like a credential, and literal credentials would land in XCom, rendered "
                                 f"fields and logs; store it in Airflow and pass it by reference: {REFERENCE_FORMS}",
                                 f"environment.{key}")
        return env

    @field_validator("connections")
    @classmethod
    def _connections(cls, connections: dict[str, str]) -> dict[str, str]:
        for scheme, conn_id in connections.items():
            if scheme not in SCHEMES:
                raise spec_error(f"keys are URI schemes: {', '.join(SCHEMES)}", f"connections.{scheme}")
            if not conn_id:
                raise spec_error("names no connection; give an Airflow connection id", f"connections.{scheme}")
        return connections

    # ---- across fields --------------------------------------------------------------------------------------
    @model_validator(mode="after")
    def _across_fields(self) -> JobSpec:
        if self.entry_point and self.command:
            raise spec_error("give either entry_point or command, not both", "command")
        if not self.entry_point and not self.command and not any(
                k in self.hyperparameters for k in ("ti_program", "sagemaker_program")):
            raise spec_error("is required (a .py or .sh file in source_dir), or give a command", "entry_point")
        clash = sorted(set(self.environment) & set(self.kubernetes.get("secret_env") or {}))
        if clash and self.backend == "kubernetes":
            raise spec_error("is also set by kubernetes.secret_env; keep one of them", f"environment.{clash[0]}")
        if "model" in self.inputs and self.resume_from:
            raise spec_error("the channel 'model' is reserved for resume_from; rename the channel", "inputs.model")
        self._check_elastic()
        self._check_reproduces()
        if self.processes_per_host > 1 and self.distribution_name not in ("pytorch", "mpi"):
            raise spec_error(f"{self.processes_per_host} processes per host need distribution pytorch or mpi; set "
                             "distribution or use processes_per_host 1", "processes_per_host")
        if self.distribution_name == "tensorflow" and self.processes_per_host > 1:
            raise spec_error("tensorflow runs one process per host; use instance_count", "processes_per_host")
        return self

    def _check_reproduces(self) -> None:
        """Every input channel pinned and every pin a channel: a reproduction runs the same channels."""
        if self.reproduces is None:
            return
        pinned, given = set(self.reproduces.data_versions), set(self.inputs)
        for channel in sorted(pinned - given):
            raise spec_error(f"pins channel {channel!r}, which inputs does not name; reproduce with the run's "
                             "channels (or leave the pin out)", f"reproduces.data_versions.{channel}")
        for channel in sorted(given - pinned):
            raise spec_error(f"names no data version for channel {channel!r} of inputs; a reproduction pins every "
                             "channel (remove reproduces to run a plain job)", "reproduces.data_versions")

    def _check_elastic(self) -> None:
        torch = self.distribution.torch_distributed if isinstance(self.distribution, DistributionOptions) else None
        if torch is not None and not torch.enabled:
            raise spec_error("is false: leave distribution out for no launcher, or set it to pytorch",
                             "distribution.torch_distributed.enabled")
        elastic = torch.elastic if torch is not None else None
        if elastic is None:
            return
        where = "distribution.torch_distributed.elastic"
        if elastic.max_hosts is not None and elastic.max_hosts != self.instance_count:
            raise spec_error(f"is {elastic.max_hosts} but instance_count is {self.instance_count}: the job starts "
                             "instance_count hosts; make them equal, or leave max_hosts out", f"{where}.max_hosts")
        max_hosts = elastic.max_hosts or self.instance_count
        if elastic.min_hosts is not None and elastic.min_hosts > max_hosts:
            raise spec_error(f"is {elastic.min_hosts}, more than max_hosts {max_hosts} (instance_count); give "
                             f"1 to {max_hosts}", f"{where}.min_hosts")

    # ---- what the stages use --------------------------------------------------------------------------------
    @property
    def distribution_name(self) -> str | None:
        """pytorch, tensorflow, mpi or None: what the runtime's trainingjobconfig.json calls the distribution."""
        if isinstance(self.distribution, DistributionOptions):
            return "pytorch"
        return self.distribution

    def elastic_settings(self) -> dict[str, int] | None:
        """{min_hosts, max_hosts, max_restarts} with the defaults filled in, or None: not elastic."""
        if not isinstance(self.distribution, DistributionOptions) or self.distribution.torch_distributed.elastic is None:
            return None
        elastic = self.distribution.torch_distributed.elastic
        max_hosts = elastic.max_hosts or self.instance_count
        return {"min_hosts": elastic.min_hosts or max_hosts, "max_hosts": max_hosts,
                "max_restarts": elastic.max_restarts}

    @property
    def job_output_uri(self) -> str:
        """`<output_path>/<job_name>/output/`: where model.tar.gz, output.tar.gz, failure, metrics.json go."""
        return job_output_uri(self.output_path, self.job_name)

    def ignored_sections(self) -> list[str]:
        """Backend option sections the job sets but its backend does not read (valid: one spec may serve several
        backends; the validate stage says so in the log)."""
        sections = {"kubernetes": self.kubernetes, "docker": self.docker}
        return [name for name, options in sections.items() if name != self.backend and options]

    def literal_environment(self) -> dict[str, str]:
        return {k: v for k, v in self.environment.items() if isinstance(v, str)}

    def secret_references(self) -> dict[str, VariableRef | ConnectionRef]:
        return {k: v for k, v in self.environment.items() if not isinstance(v, str)}

    def backend_options(self) -> dict[str, Any]:
        """The launcher's per-job options: the section of the job's backend."""
        return dict({"kubernetes": self.kubernetes, "docker": self.docker}.get(self.backend) or {})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """The validated spec (validate_spec's XCom), less the run's owner the platform put beside it."""
        return cls.model_validate({k: v for k, v in data.items() if k != OWNER_KEY}, context={VALIDATED: True})


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


def validate_spec(
    raw: Mapping[str, Any],
    *,
    option_models: Mapping[str, type[BaseModel]],
    default_job_name: str | None = None,
    default_base_job_name: str | None = None,
    default_backend: str = "local",
    default_layout: str = "ti",
) -> JobSpec:
    """Check a raw spec (Params, --conf or a config file) and return the JobSpec; raise SpecError naming the field.
    `option_models`: backend name -> the model of its options section (operators/launch/registry.py option_models)."""
    if not isinstance(raw, Mapping):
        raise SpecError("(spec)", f"must be a JSON object, got {json_text(raw)[:80]}")
    spec = {k: v for k, v in raw.items() if v is not None and v != ""}  # the form sends empty fields as null
    defaults = {"job_name": default_job_name, "base_job_name": default_base_job_name, "backend": default_backend,
                "layout": default_layout}
    for key, value in defaults.items():
        if key not in spec and value is not None:
            spec[key] = value
    if "job_name" not in spec:
        raise SpecError("job_name", "is required (or let the DAG derive it from the run)")
    try:
        return JobSpec.model_validate(spec, context={OPTION_MODELS: option_models})
    except ValidationError as err:
        raise first_error(err, JobSpec) from None

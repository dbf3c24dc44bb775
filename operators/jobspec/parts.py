"""The nested parts of the job spec model (operators/jobspec/model.py): resources, distribution, metric definitions,
secret references, and the building blocks (Strict, Count, spec_error) each container backend's options model uses
(operators/launch/<backend>/options.py). Pydantic v2 (installed with Airflow): every model forbids unknown keys, so a
typo at any level (`kubernetes.namspace`) is an error naming it, never silently ignored.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)
from pydantic_core import PydanticCustomError

from operators.jobspec.metric_regex import MetricRegexError, compile_metric_regex
from operators.quantities import parse_quantity


def spec_error(message: str, field: str | None = None, details: list[str] | None = None) -> PydanticCustomError:
    """A validation error whose text is `message` as is; `field` overrides the location (a key inside a mapping);
    `details`: the log's lines of the nested model's problems it stands for (operators/jobspec/errors.py)."""
    context: dict[str, Any] = {"msg": message}
    if field is not None:
        context["field"] = field
    if details:
        context["details"] = details
    return PydanticCustomError("spec", "{msg}", context)


def _no_bool(value: Any) -> Any:
    # JSON true is not a count: pydantic's lax int would take it as 1.
    if isinstance(value, bool):
        raise spec_error(f"must be an integer, got {json_text(value)}")
    return value


def json_text(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


Count = Annotated[int, BeforeValidator(_no_bool)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _quantity(value: Any, what: str, example: str) -> str | None:
    """A Kubernetes quantity (operators/quantities.py, the one parser) kept as the user wrote it."""

    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise spec_error(f"{json_text(value)} is not a {what} quantity (e.g. {example})")
    try:
        number = parse_quantity(value)
    except ValueError:
        raise spec_error(f"{json_text(value)} is not a {what} quantity (e.g. {example})") from None
    if number <= 0:
        raise spec_error(f"must be > 0, got {json_text(value)}")
    return str(value)


class Resources(Strict):
    """Per host. Kubernetes quantities; the docker backend converts them."""

    # Numbers or strings in the form and --conf; kept as the string the user wrote.
    cpu: str | float | None = Field(None, description="CPUs per host: 2, 0.5 or 500m.")
    memory: str | float | None = Field(None, description="Memory per host: 4Gi, 512Mi (or bytes).")
    gpu: Count = Field(0, ge=0, le=64, description="GPUs per host.")
    # Not per host: the job root is the job's, all its hosts share it (operators/launch/disk_cap.py).
    disk: str | float | None = Field(None, description="Disk the job root may hold, all hosts together: 20Gi (at "
                                     "most the admin's [training] job_disk_limit, the default).")

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> str | None:
        if value is not None and not re.match(r"^[0-9]+(\.[0-9]+)?m?$", str(value)):
            raise spec_error(f"{json_text(value)} is not a CPU quantity (e.g. 2, 0.5 or 500m)")
        return _quantity(value, "CPU", "2, 0.5 or 500m")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str | None:
        return _quantity(value, "memory", "4Gi or 512Mi")

    @field_validator("disk", mode="before")
    @classmethod
    def _disk(cls, value: Any) -> str | None:
        return _quantity(value, "disk", "20Gi or 512Mi")


class Elastic(Strict):
    """Elastic training (torchrun's `--nnodes MIN:MAX --max-restarts`): the job goes on while at least min_hosts hosts
    are there; a lost host (evicted, drained, killed, OOM) is started again and rejoins."""

    min_hosts: Count | None = Field(None, ge=1, le=256, description="The fewest hosts the training goes on with; "
                                    "empty: max_hosts (a fixed group that survives the loss of a host).")
    max_hosts: Count | None = Field(None, ge=1, le=256, description="The most hosts: instance_count (empty: the "
                                    "same).")
    max_restarts: Count = Field(3, ge=0, le=100, description="How often each host may be started again (its pod "
                                "replaced, its container restarted) and torchrun may restart its processes.")


class TorchDistributed(Strict):
    """SageMaker's `distribution={"torch_distributed": {"enabled": True}}`: torchrun on every host, here with an
    optional elastic section."""

    enabled: bool = Field(True, description="torchrun on every host.")
    elastic: Elastic | None = Field(None, description="Elastic training: {min_hosts, max_hosts, max_restarts}.")


class DistributionOptions(Strict):
    """The object form of `distribution` (SageMaker's): {"torch_distributed": {"enabled": true, "elastic": {...}}}."""

    torch_distributed: TorchDistributed = Field(description="PyTorch through torchrun.")


class MetricDefinition(Strict):
    """A metric read from the training log, SageMaker style."""

    Name: str = Field(min_length=1, max_length=128, description="Metric name, e.g. loss.")
    Regex: str = Field(min_length=1, max_length=1024, description="One capture group holding the value; RE2 syntax "
                       "(linear time: no lookaround or backreferences).")

    @field_validator("Regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        # The error names metric_definitions[i].Regex; RE2's syntax, the engine the worker matches with.
        try:
            compile_metric_regex(value)
        except MetricRegexError as err:
            raise spec_error(str(err)) from None
        return value


class VariableRef(Strict):
    """An environment value read from an Airflow Variable at launch: {"variable": "wandb_api_key"}."""

    variable: str = Field(min_length=1, max_length=250, description="Airflow Variable key.")


CONNECTION_FIELDS = r"^(login|password|host|port|schema|uri|extra(\.[A-Za-z0-9_.-]+)?)$"


class ConnectionRef(Strict):
    """An environment value read from a field of an Airflow connection at launch:
    {"connection": "warehouse", "field": "password"} (login, password, host, port, schema, uri, extra, extra.<key>)."""

    connection: str = Field(min_length=1, max_length=250, description="Airflow connection id.")
    field: str = Field("password", pattern=CONNECTION_FIELDS, description="The connection field to read.")


REFERENCE_FORMS = '{"variable": "<Airflow Variable key>"} or {"connection": "<connection id>", "field": "password"}'

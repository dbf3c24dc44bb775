"""The nested parts of the job spec model (operators/jobspec/model.py): resources, metric definitions and each container
backend's options. Pydantic v2 (installed with Airflow): every model forbids unknown keys, so a typo at any level
(`kubernetes.namspace`) is an error naming it, never silently ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError



def spec_error(message: str, field: str | None = None) -> PydanticCustomError:
    """A validation error whose text is `message` as is; `field` overrides the location (a key inside a mapping)."""
    context: dict[str, Any] = {"msg": message}
    if field is not None:
        context["field"] = field
    return PydanticCustomError("spec", "{msg}", context)


def _no_bool(value: Any) -> Any:
    # JSON true is not a count: pydantic's lax int would take it as 1.
    if isinstance(value, bool):
        raise spec_error(f"must be an integer, got {json_text(value)}")
    return value


def json_text(value: Any) -> str:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


Count = Annotated[int, BeforeValidator(_no_bool)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _quantity(value: Any, what: str, example: str) -> str | None:
    """A Kubernetes quantity (operators/quantities.py, the one parser) kept as the user wrote it."""
    from operators.quantities import parse_quantity

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
    Regex: str = Field(min_length=1, max_length=1024, description="One capture group holding the value.")

    @model_validator(mode="after")
    def _regex(self) -> MetricDefinition:
        # A model-level check: the error names the definition (metric_definitions[i]), whose Regex it quotes.
        try:
            pattern = re.compile(self.Regex)
        except re.error as err:
            raise spec_error(f"Regex does not compile: {err}") from None
        if pattern.groups < 1:
            raise spec_error("Regex needs one capture group holding the value")
        return self


SecretRef = str | dict[str, str]


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


class KubernetesOptions(Strict):
    """Per-job Kubernetes options; empty ones take airflow.cfg [training.kubernetes]. Where the pod runs and what it
    may do (namespace, service account, workspace volume, uid, security contexts) come from the admin-defined profile
    the spec names: setting them to anything else is refused in the first task (operators/launch/kubernetes/profiles.py)."""

    profile: str | None = Field(None, max_length=253, description="An admin-defined profile ([training.kubernetes] "
                                "profiles): namespace, service account, security contexts; empty: default.")
    namespace: str | None = Field(None, max_length=63, description="Namespace of the Job.")
    workspace_pvc: str | None = Field(None, description="ReadWriteMany claim holding the workspace.")
    workspace_subpath: str | None = Field(None, description="Where the workspace lives inside that volume.")
    service_account: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    image_pull_secrets: list[str] | None = None
    priority_class: str | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None
    keep_finished_jobs: bool | None = None
    ttl_seconds_after_finished: Count | None = Field(None, ge=0)
    run_as_user: Count | None = Field(None, ge=1)
    security_context: dict[str, Any] | None = Field(None, description="Pod securityContext fields (camelCase).")
    container_security_context: dict[str, Any] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    backoff_limit: Count | None = Field(None, ge=0, le=100)
    gpu_resource: str | None = Field(None, description="Extended resource name of a GPU (nvidia.com/gpu).")
    shm_size: str | None = Field(None, description="Size of /dev/shm, e.g. 2Gi; empty: 1Gi.")
    secret_env: dict[str, SecretRef] | None = Field(
        None, description='Variable -> "<secret>/<key>" of a Kubernetes Secret.')
    env_from_secrets: list[str] | None = None
    image_pull_grace_seconds: Count | None = Field(None, ge=0)
    startup_timeout_seconds: Count | None = Field(
        None, ge=1, description="How long a pod placed on a node may take to start its container (the image pull "
        "included) before the job fails as a platform error; empty: 600.")
    poll_interval: float | None = Field(None, gt=0, le=300)
    propagation_policy: Literal["Foreground", "Background"] | None = None
    queue: str | None = Field(None, max_length=63, description="A Kueue LocalQueue among the admin's "
                              "([training.kubernetes] queues): the job waits there until all its hosts fit the "
                              "queue's quota; empty: the admin's default queue.")
    queue_priority: str | None = Field(None, max_length=253, description="A Kueue WorkloadPriorityClass among the "
                                       "admin's ([training.kubernetes] queue_priorities); empty: the default.")

    def launch_options(self) -> dict[str, Any]:
        """The options a launcher receives (LaunchRequest.options): what the job set."""
        return self.model_dump(exclude_none=True)


class DockerOptions(Strict):
    """Per-job Docker options."""

    user: str | None = Field(None, description="uid:gid (or a user name of the image) the containers run as, never "
                             "root; empty: the image's non-root user (the worker's uid:gid if it is not root).")
    shm_size: str | None = Field(None, description="Size of /dev/shm, e.g. 2Gi; empty: 1Gi.")
    keep_containers: bool = Field(False, description="Keep containers and network after the job (debugging).")
    host_workspace: str | None = Field(None, description="The workspace's path on the engine's host, when the "
                                       "worker sees it elsewhere (a worker in a container).")
    image_pull_grace_seconds: Count | None = Field(None, ge=0)
    poll_interval: float | None = Field(None, gt=0, le=300)
    stop_timeout: Count | None = Field(None, ge=0, le=3600)
    secret_variables: dict[str, str] | None = Field(
        None, description='Variable -> Airflow Variable key, read at launch into a read-only file '
        '(e.g. {"WANDB_API_KEY": "wandb_api_key"}).')

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        from operators.jobspec.container_users import root_part

        if value is None or not value.strip():
            return None
        part = root_part(value)
        if part:
            raise spec_error(f"is {json_text(value)}, whose {part} is root: training containers never run as root; "
                             "give a non-root uid:gid (e.g. 1000:1000), or leave it out to use the image's user")
        return value.strip()

    @field_validator("host_workspace")
    @classmethod
    def _host_workspace(cls, value: str | None) -> str | None:
        if value:
            raise spec_error("is an admin setting (what the Docker engine bind-mounts): remove it from the spec; an "
                             "admin sets [training.docker] host_workspace in airflow.cfg")
        return None

    def launch_options(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude_defaults=True)



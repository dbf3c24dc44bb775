"""Per-job Kubernetes options: the spec's `kubernetes` section (its model, KubernetesOptions, validates it in the first
task through the launch registry), checked and resolved over the [training.kubernetes] settings when the job
launches (LaunchRequest.options), and the credential policy of the job's environment: pure functions, no I/O, no
client.

``resolve_options`` merges a job's options over the settings into a ``KubernetesJobOptions``; an unknown key or a bad
value raises ValueError, one line naming the option (``kubernetes option 'image_pull_policy' is 'Sometimes'; use
Always, IfNotPresent or Never``).

Credentials: only references to Kubernetes Secrets ever reach a pod spec (``secret_env`` ->
``valueFrom.secretKeyRef``, ``env_from_secrets`` -> ``envFrom.secretRef``). A literal ``env`` entry whose
name or value looks like a credential is refused when the manifest is built (the policy:
operators/launch/container_env.py, shared with the Docker backend).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from pydantic import Field

from operators.jobspec.parts import Count, Strict
from operators.launch.kubernetes.profiles import profile_for
from operators.launch.kubernetes.queues import queue_choice
from operators.launch.kubernetes.settings import DEFAULT_DATA_PLANE
from operators.launch.kubernetes.names import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_env_var_name,
    is_label_key,
    is_label_value,
)
from operators.quantities import is_quantity

SecretRef = str | dict[str, str]


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


# The option names a launch accepts: the model's fields, never typed twice.
OPTION_KEYS = tuple(KubernetesOptions.model_fields)


@dataclass(frozen=True)
class KubernetesJobOptions:
    """Per-job options (LaunchRequest.options) resolved over the [training.kubernetes] defaults."""

    namespace: str = "default"
    workspace_pvc: str = "training-workspace"
    workspace_subpath: str = ""  # where the workspace lives inside the volume ("" = its root)
    service_account: str = ""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    priority_class: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    keep_finished_jobs: bool = False
    ttl_seconds_after_finished: int = 600
    run_as_user: int = 1000
    security_context: Mapping[str, Any] = field(default_factory=dict)  # pod-level overrides (camelCase)
    container_security_context: Mapping[str, Any] = field(default_factory=dict)  # container-level overrides
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    backoff_limit: int = 2
    gpu_resource: str = "nvidia.com/gpu"
    shm_size: str | None = "1Gi"
    secret_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # VAR -> (secret, key)
    env_from_secrets: tuple[str, ...] = ()
    image_pull_grace_seconds: int = 600  # how long a registry rate limit (429) is waited out
    startup_timeout_seconds: int = 600  # a pod on a node that has not started its container by then has failed
    poll_interval: float = 5.0
    propagation_policy: str = "Foreground"
    queue: str = ""  # Kueue LocalQueue: the Job is created suspended and admitted whole (operators/launch/kubernetes/queues.py)
    queue_priority: str = ""  # Kueue WorkloadPriorityClass
    # The profile's data plane (operators/launch/kubernetes/data_plane.py); never a spec's.
    data_plane: str = DEFAULT_DATA_PLANE
    data_plane_image: str = "training-airflow:latest"
    storage_secret: str = ""
    data_plane_service_account: str = ""
    data_plane_queue: str = ""
    data_plane_uid: int = 50000
    workspace_group: int = 1000
    data_plane_workspace: str = "/workspace"

    @property
    def in_cluster(self) -> bool:
        """The job's bytes move in the cluster: the Airflow worker has no workspace volume."""
        return self.data_plane == "cluster"

    def waiting(self) -> dict[str, float]:
        """How the job's watch waits (the same in the worker and in the triggerer)."""
        return {"poll_interval": self.poll_interval, "image_pull_grace_seconds": self.image_pull_grace_seconds,
                "startup_timeout_seconds": self.startup_timeout_seconds}


def _fail(key: str, problem: str, fix: str) -> ValueError:
    return ValueError(f"kubernetes option '{key}' {problem}; {fix}")


def _as_int(key: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _fail(key, f"is {value!r}", f"give an integer >= {minimum}")
    try:
        number = int(value)
    except ValueError:
        raise _fail(key, f"is {value!r}", f"give an integer >= {minimum}") from None
    if number < minimum:
        raise _fail(key, f"is {number}", f"give an integer >= {minimum}")
    return number


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "0", "false", "no"):
        return value.strip().lower() in ("1", "true", "yes")
    raise _fail(key, f"is {value!r}", "give true or false")


def _as_str_map(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _fail(key, f"is {type(value).__name__}", 'give an object of strings, e.g. {"pool": "gpu"}')
    return {str(k): str(v) for k, v in value.items()}


def _as_str_tuple(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split(",") if x.strip())
    if isinstance(value, (list, tuple)):
        return tuple(str(x) for x in value)
    raise _fail(key, f"is {type(value).__name__}", "give a list of names")


def _secret_ref(var: str, ref: Any) -> tuple[str, str]:
    """'secret/key' or {"name": secret, "key": key} -> (secret, key)."""
    if isinstance(ref, Mapping) and ref.get("name") and ref.get("key"):
        secret, key = str(ref["name"]), str(ref["key"])
    elif isinstance(ref, str) and ref.count("/") == 1 and all(ref.split("/")):
        secret, key = ref.split("/")
    else:
        raise _fail(
            f"secret_env.{var}", "is not a Secret reference", 'give "<secret name>/<key>" or {"name": ..., "key": ...}'
        )
    if not is_dns1123_subdomain(secret):
        raise _fail(f"secret_env.{var}", f"names Secret {secret!r}, not a valid name", "use the Secret's real name")
    return secret, key


def resolve_options(options: Mapping[str, Any] | None, settings: Any) -> KubernetesJobOptions:
    """Per-job options over the [training.kubernetes] settings (a KubernetesSettings); bad values -> ValueError."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown:
        raise _fail(unknown[0], "is not a known option", f"use one of: {', '.join(OPTION_KEYS)}")

    def pick(key: str, default: Any) -> Any:
        value = options.get(key)
        return default if value is None else value

    # The profile (admin-defined, operators/launch/kubernetes/profiles.py) gives where the pod runs and what it may do; the
    # spec cannot override it (spec_checks refuses that in the first task), only the platform's own callers can.
    profile = profile_for(options, settings)
    queue, queue_priority = queue_choice(options, settings)
    namespace = str(pick("namespace", profile["namespace"]))
    if not is_dns1123_label(namespace):
        raise _fail("namespace", f"is {namespace!r}, not a valid namespace name", "use lowercase letters, digits, '-'")
    pvc = str(pick("workspace_pvc", profile["workspace_pvc"]))
    if not is_dns1123_subdomain(pvc):
        raise _fail(
            "workspace_pvc", f"is {pvc!r}, not a valid PVC name", "name the ReadWriteMany claim of the workspace"
        )
    subpath = str(pick("workspace_subpath", profile["workspace_subpath"] or "")).strip("/")
    if subpath and (".." in subpath.split("/") or posixpath.isabs(subpath)):
        raise _fail("workspace_subpath", f"is {subpath!r}", "give a relative path inside the volume, without '..'")
    pull_policy = str(pick("image_pull_policy", settings.image_pull_policy))
    if pull_policy not in ("Always", "IfNotPresent", "Never"):
        raise _fail("image_pull_policy", f"is {pull_policy!r}", "use Always, IfNotPresent or Never")
    tolerations = pick("tolerations", settings.tolerations)
    if not isinstance(tolerations, (list, tuple)) or not all(isinstance(t, Mapping) for t in tolerations):
        raise _fail("tolerations", "is not a list of objects", 'give e.g. [{"key": "gpu", "operator": "Exists"}]')
    propagation = str(pick("propagation_policy", "Foreground"))
    if propagation not in ("Foreground", "Background"):
        raise _fail("propagation_policy", f"is {propagation!r}", "use Foreground or Background")
    shm = pick("shm_size", "1Gi")
    shm = None if shm in ("", False, 0, "0") else str(shm)
    if shm is not None and not is_quantity(shm):
        raise _fail("shm_size", f"is {shm!r}", "give a Kubernetes quantity like '2Gi', or '' for none")
    secret_refs = _as_str_map_any("secret_env", pick("secret_env", {}))
    secret_env = {str(k): _secret_ref(str(k), v) for k, v in secret_refs.items()}
    for var in secret_env:
        if not is_env_var_name(var):
            raise _fail(f"secret_env.{var}", "is not a valid environment variable name", "use letters, digits, '_'")
    poll = pick("poll_interval", 5.0)
    try:
        poll = float(poll)
    except (TypeError, ValueError):
        raise _fail("poll_interval", f"is {poll!r}", "give seconds as a number") from None
    if poll <= 0:
        raise _fail("poll_interval", f"is {poll}", "give a positive number of seconds")
    for key in ("security_context", "container_security_context"):
        if not isinstance(pick(key, profile[key]), Mapping):
            raise _fail(key, "is not an object", 'give Kubernetes fields in camelCase, e.g. {"runAsUser": 50000}')
    labels = _as_str_map("labels", pick("labels", {}))
    for key, value in labels.items():
        if not is_label_key(key) or not is_label_value(value):
            raise _fail(
                f"labels.{key}", f"= {value!r} is not a valid label", "keys/values: <= 63 chars of [A-Za-z0-9-_.]"
            )
    return KubernetesJobOptions(
        namespace=namespace,
        workspace_pvc=pvc,
        workspace_subpath=subpath,
        service_account=str(pick("service_account", profile["service_account"] or "")),
        image_pull_policy=pull_policy,
        image_pull_secrets=_as_str_tuple("image_pull_secrets", pick("image_pull_secrets", settings.image_pull_secrets)),
        priority_class=str(pick("priority_class", settings.priority_class)),
        node_selector=_as_str_map("node_selector", pick("node_selector", settings.node_selector)),
        tolerations=tuple(dict(t) for t in tolerations),
        keep_finished_jobs=_as_bool("keep_finished_jobs", pick("keep_finished_jobs", settings.keep_finished_jobs)),
        ttl_seconds_after_finished=_as_int(
            "ttl_seconds_after_finished", pick("ttl_seconds_after_finished", settings.ttl_seconds_after_finished)
        ),
        run_as_user=_as_int("run_as_user", pick("run_as_user", profile["run_as_user"])),
        security_context=dict(pick("security_context", profile["security_context"])),
        container_security_context=dict(pick("container_security_context", profile["container_security_context"])),
        labels=labels,
        annotations=_as_str_map("annotations", pick("annotations", {})),
        backoff_limit=_as_int("backoff_limit", pick("backoff_limit", 2)),
        gpu_resource=str(pick("gpu_resource", "nvidia.com/gpu")),
        shm_size=shm,
        secret_env=secret_env,
        env_from_secrets=_as_str_tuple("env_from_secrets", pick("env_from_secrets", ())),
        image_pull_grace_seconds=_as_int("image_pull_grace_seconds", pick("image_pull_grace_seconds", 600)),
        startup_timeout_seconds=_as_int("startup_timeout_seconds", pick("startup_timeout_seconds", 600), minimum=1),
        poll_interval=poll,
        propagation_policy=propagation,
        queue=queue,
        queue_priority=queue_priority,
        data_plane=str(profile.get("data_plane") or DEFAULT_DATA_PLANE),
        data_plane_image=str(getattr(settings, "data_plane_image", "") or KubernetesJobOptions.data_plane_image),
        storage_secret=str(profile.get("storage_secret") or ""),
        data_plane_service_account=str(profile.get("data_plane_service_account") or ""),
        data_plane_queue=str(profile.get("data_plane_queue") or ""),
        data_plane_uid=int(getattr(settings, "data_plane_uid", 50000)),
        workspace_group=int(getattr(settings, "workspace_group", 1000)),
        data_plane_workspace=str(getattr(settings, "data_plane_workspace", "") or "/workspace"),
    )


def _as_str_map_any(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(key, f"is {type(value).__name__}", 'give an object, e.g. {"HF_TOKEN": "hf-credentials/token"}')
    return dict(value)

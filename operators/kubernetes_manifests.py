"""Kubernetes names, labels and manifests of a training job: pure functions, no I/O, no client.

One training job = one Indexed Job (a pod per host, completions = parallelism = instance_count) plus a
headless Service whose name is the pods' subdomain, so host i is reachable as ``<name>-<i>.<name>``
(Kubernetes names an Indexed Job's pods ``<job>-<index>``). ``<name>`` is derived deterministically
from ``job_name`` (the idempotency key): a retried task or a restarted worker computes the same name
and reattaches to the Job already there instead of starting a second one.

The manifests are plain dicts in the API's camelCase form: they are what the API server receives
(the launcher posts them with the kubernetes client) and what the tests validate against the
Kubernetes OpenAPI schema with ``kubernetes-validate``. The provider's ``PodGenerator`` builds
V1Pod objects for single pods (KubernetesPodOperator) and has no notion of Indexed Jobs, pod failure
policies or the job-root/cache sub-path mounts, so the Job spec is built here.

Credentials: only references to Kubernetes Secrets ever reach a pod spec (``secret_env`` ->
``valueFrom.secretKeyRef``, ``env_from_secrets`` -> ``envFrom.secretRef``). A literal ``env`` entry whose
name or value looks like a credential is refused (:class:`SecretInEnvError`): the value would be
readable by anyone who can read Jobs in the namespace, and would end up in logs and XCom.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

LAYOUT_ROOTS = {
    "ti": "/opt/ml",
    "sagemaker": "/opt/ml",
    "pai": "/ml",
    "modelarts": "/home/ma-user/modelarts",
}
CONTAINER_NAME = "train"
WORKSPACE_VOLUME = "workspace"
SHM_VOLUME = "dshm"

# Exit codes of the runtime (`train`): 1 user code failed, 2 invalid job, 3 requirements install failed,
# 4 platform error. 1-3 are the user's to fix: the pod failure policy fails the Job at once instead of
# spending the backoff limit on them; 4 counts against backoffLimit (retried by Kubernetes).
USER_EXIT_CODES = (1, 2, 3)
PLATFORM_EXIT_CODE = 4

LABEL_PREFIX = "airflow-training-jobs"
JOB_LABEL = f"{LABEL_PREFIX}/job"  # value: the Kubernetes name; selects the Job's pods and Service
ORIGINAL_NAME_ANNOTATION = f"{LABEL_PREFIX}/job-name"  # the job_name as the user wrote it
SPEC_HASH_ANNOTATION = f"{LABEL_PREFIX}/spec-hash"
MANAGED_BY = "airflow-training-jobs"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# A pod's hostname is "<job>-<index>" and must stay a DNS label (<= 63): keep room for 10 index digits.
MAX_NAME_LENGTH = 52
_HASH_LENGTH = 8

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkKMGTPE]i?|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_CHANNEL = re.compile(r"^[A-Za-z0-9_-]+$")

# Names and values that are credentials. Matching is deliberately broad: a false positive costs the
# user one line of config (a secret_env reference), a false negative leaks a credential.
_SECRET_NAME = re.compile(
    r"(SECRET|PASSWORD|PASSWD|PASSPHRASE|TOKEN|CREDENTIAL|PRIVATE_?KEY|ACCESS_?KEY|API_?KEY|AUTH)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"(-----BEGIN [A-Z ]*PRIVATE KEY-----|\b(AKIA|ASIA)[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{30,}\b"
    r"|\bxox[baprs]-[A-Za-z0-9-]{10,}\b|\bhf_[A-Za-z0-9]{30,}\b|\bsk-[A-Za-z0-9_-]{20,}\b)"
)
# Set by Kubernetes or by us for each pod; overriding them would give every pod the same host identity.
_RESERVED_ENV = frozenset({"JOB_COMPLETION_INDEX", "TRAINING_CURRENT_HOST", "TRAINING_ROOT"})

# The restricted Pod Security Standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)

OPTION_KEYS = (
    "namespace",
    "workspace_pvc",
    "workspace_subpath",
    "service_account",
    "image_pull_policy",
    "image_pull_secrets",
    "priority_class",
    "node_selector",
    "tolerations",
    "keep_finished_jobs",
    "ttl_seconds_after_finished",
    "run_as_user",
    "security_context",
    "container_security_context",
    "labels",
    "annotations",
    "backoff_limit",
    "gpu_resource",
    "shm_size",
    "secret_env",
    "env_from_secrets",
    "image_pull_grace_seconds",
    "poll_interval",
    "propagation_policy",
)


class SecretInEnvError(ValueError):
    """A literal credential in the job's environment."""


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
    poll_interval: float = 5.0
    propagation_policy: str = "Foreground"


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

    namespace = str(pick("namespace", settings.namespace))
    if not is_dns1123_label(namespace):
        raise _fail("namespace", f"is {namespace!r}, not a valid namespace name", "use lowercase letters, digits, '-'")
    pvc = str(pick("workspace_pvc", settings.workspace_pvc))
    if not is_dns1123_subdomain(pvc):
        raise _fail(
            "workspace_pvc", f"is {pvc!r}, not a valid PVC name", "name the ReadWriteMany claim of the workspace"
        )
    subpath = str(pick("workspace_subpath", "")).strip("/")
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
    if shm is not None and not _QUANTITY.match(shm):
        raise _fail("shm_size", f"is {shm!r}", "give a Kubernetes quantity like '2Gi', or '' for none")
    secret_refs = _as_str_map_any("secret_env", pick("secret_env", {}))
    secret_env = {str(k): _secret_ref(str(k), v) for k, v in secret_refs.items()}
    for var in secret_env:
        if not _ENV_NAME.match(var):
            raise _fail(f"secret_env.{var}", "is not a valid environment variable name", "use letters, digits, '_'")
    poll = pick("poll_interval", 5.0)
    try:
        poll = float(poll)
    except (TypeError, ValueError):
        raise _fail("poll_interval", f"is {poll!r}", "give seconds as a number") from None
    if poll <= 0:
        raise _fail("poll_interval", f"is {poll}", "give a positive number of seconds")
    for key in ("security_context", "container_security_context"):
        if not isinstance(pick(key, {}), Mapping):
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
        service_account=str(pick("service_account", settings.service_account)),
        image_pull_policy=pull_policy,
        image_pull_secrets=_as_str_tuple("image_pull_secrets", pick("image_pull_secrets", settings.image_pull_secrets)),
        priority_class=str(pick("priority_class", settings.priority_class)),
        node_selector=_as_str_map("node_selector", pick("node_selector", settings.node_selector)),
        tolerations=tuple(dict(t) for t in tolerations),
        keep_finished_jobs=_as_bool("keep_finished_jobs", pick("keep_finished_jobs", settings.keep_finished_jobs)),
        ttl_seconds_after_finished=_as_int(
            "ttl_seconds_after_finished", pick("ttl_seconds_after_finished", settings.ttl_seconds_after_finished)
        ),
        run_as_user=_as_int("run_as_user", pick("run_as_user", settings.run_as_user)),
        security_context=dict(pick("security_context", {})),
        container_security_context=dict(pick("container_security_context", {})),
        labels=labels,
        annotations=_as_str_map("annotations", pick("annotations", {})),
        backoff_limit=_as_int("backoff_limit", pick("backoff_limit", 2)),
        gpu_resource=str(pick("gpu_resource", "nvidia.com/gpu")),
        shm_size=shm,
        secret_env=secret_env,
        env_from_secrets=_as_str_tuple("env_from_secrets", pick("env_from_secrets", ())),
        image_pull_grace_seconds=_as_int("image_pull_grace_seconds", pick("image_pull_grace_seconds", 600)),
        poll_interval=poll,
        propagation_policy=propagation,
    )


def _as_str_map_any(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(key, f"is {type(value).__name__}", 'give an object, e.g. {"HF_TOKEN": "hf-credentials/token"}')
    return dict(value)


# ---- names -------------------------------------------------------------------------------------------


def is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1123_LABEL.match(value))


def is_dns1035_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1035_LABEL.match(value))


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(_DNS1123_SUBDOMAIN.match(value))


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_LABEL_NAME.match(value)))


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns1123_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def kube_name(job_name: str) -> str:
    """The Job/Service name of a job: a DNS-1035 label of at most MAX_NAME_LENGTH, the same on every call.

    A job_name that already is such a name is used as is (so `kubectl get job <job_name>` works). Anything
    else is lowercased, every run of other characters becomes '-', and a hash of the original job_name is
    appended, so two job names that differ only in characters Kubernetes refuses ('My_Job' and 'my-job')
    never share a Job.
    """
    if not job_name:
        raise ValueError("job_name is empty; give the job a name (it is the idempotency key)")
    if is_dns1035_label(job_name) and len(job_name) <= MAX_NAME_LENGTH:
        return job_name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:_HASH_LENGTH]
    base = re.sub(r"[^a-z0-9]+", "-", job_name.lower()).strip("-")
    if not base or not base[0].isalpha():
        base = "job-" + base
    base = base[: MAX_NAME_LENGTH - _HASH_LENGTH - 1].rstrip("-")
    return f"{base}-{digest}"


def host_names(name: str, instance_count: int) -> list[str]:
    """`<name>-<i>.<name>`: the pod hostname Kubernetes gives index i, under the headless Service."""
    if instance_count < 1:
        raise ValueError(f"instance_count is {instance_count}; give at least 1 host")
    return [f"{name}-{index}.{name}" for index in range(instance_count)]


def selector_labels(name: str) -> dict[str, str]:
    return {JOB_LABEL: name}


def job_labels(name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    labels = dict(extra or {})
    labels.update(
        {
            "app.kubernetes.io/name": "training-job",
            "app.kubernetes.io/instance": name,
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/component": "training",
        }
    )
    labels.update(selector_labels(name))
    return labels


# ---- pieces of the pod spec ---------------------------------------------------------------------------


def _quantity(field_name: str, value: Any) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not _QUANTITY.match(text):
        raise ValueError(
            f"resources.{field_name} is {value!r}, not a Kubernetes quantity; "
            "write e.g. cpu: 2 or '500m', memory: '8Gi'"
        )
    return text


def resource_requirements(resources: Mapping[str, Any], gpu_resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """cpu/memory as requests = limits (Guaranteed QoS: a training pod should not be squeezed); GPUs as limits."""
    unknown = sorted(set(resources) - {"cpu", "memory", "gpu"})
    if unknown:
        raise ValueError(f"resources.{unknown[0]} is not a resource; use cpu, memory and gpu")
    amounts: dict[str, str] = {}
    for key in ("cpu", "memory"):
        if resources.get(key) not in (None, "", 0):
            amounts[key] = _quantity(key, resources[key])
    gpus = resources.get("gpu") or 0
    if isinstance(gpus, bool) or not isinstance(gpus, (int, str)) or not str(gpus).isdigit():
        raise ValueError(f"resources.gpu is {gpus!r}; give a whole number of GPUs per host")
    result: dict[str, Any] = {}
    if amounts:
        result["requests"] = dict(amounts)
        result["limits"] = dict(amounts)
    if int(gpus) > 0:
        result.setdefault("limits", {})[gpu_resource] = str(int(gpus))
    return result


def pod_security_context(options: KubernetesJobOptions) -> dict[str, Any]:
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": options.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    context.update(options.security_context)
    return context


def container_security_context(options: KubernetesJobOptions) -> dict[str, Any]:
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    context.update(options.container_security_context)
    return context


def looks_like_secret(name: str, value: str) -> bool:
    return bool(_SECRET_NAME.search(name) or _SECRET_VALUE.search(value or ""))


def container_path(value: str, job_root: str, root: str) -> str:
    """A path the Airflow side wrote under the job root, as the container sees it (under the layout root)."""
    job_root = posixpath.normpath(job_root)
    if value == job_root:
        return root
    if value.startswith(job_root + "/"):
        return root + value[len(job_root):]
    return value


def env_vars(
    env: Mapping[str, str], options: KubernetesJobOptions, job_root: str | None = None, root: str | None = None
) -> list[dict[str, Any]]:
    """Literal variables (refusing credentials; job-root paths translated) followed by Secret references."""
    result: list[dict[str, Any]] = []
    for name, value in env.items():
        if job_root and root:
            value = container_path(str(value), job_root, root)
        if not _ENV_NAME.match(name):
            raise ValueError(f"env {name!r} is not a valid environment variable name; use letters, digits and '_'")
        if name in _RESERVED_ENV:
            raise ValueError(f"env {name} is set by the launcher for each host; remove it from the job's env")
        if name in options.secret_env:
            raise ValueError(f"env {name} is given both literally and in options.secret_env; keep only the Secret")
        if looks_like_secret(name, str(value)):
            # Never echo the value: it is the secret.
            raise SecretInEnvError(
                f"env {name} looks like a credential and literal credentials are never put into a pod spec; "
                f'store it in a Kubernetes Secret and pass options.secret_env {{"{name}": "<secret>/<key>"}} instead'
            )
        # "$(X)" in a value is expanded by Kubernetes; "$$(" keeps it literal, as the job wrote it.
        result.append({"name": name, "value": str(value).replace("$(", "$$(")})
    for name, (secret, key) in sorted(options.secret_env.items()):
        result.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return result


def workspace_subpath(path: str, workspace: str, options: KubernetesJobOptions, what: str) -> str:
    """The sub-path inside the workspace volume of a directory the Airflow side sees at `path`."""
    relative = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(workspace))
    if relative == "." or relative.startswith("..") or posixpath.isabs(relative):
        raise ValueError(
            f"{what} {path} is not inside the workspace {workspace}; on Kubernetes every job root and cache entry "
            "must live in the shared workspace volume ([training] workspace)"
        )
    return posixpath.join(options.workspace_subpath, relative) if options.workspace_subpath else relative


def volumes_and_mounts(request: Any, options: KubernetesJobOptions) -> tuple[list[dict], list[dict]]:
    root = layout_root(request.layout)
    volumes: list[dict[str, Any]] = [
        {"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": options.workspace_pvc}}
    ]
    mounts: list[dict[str, Any]] = [
        {
            "name": WORKSPACE_VOLUME,
            "mountPath": root,
            "subPath": workspace_subpath(request.job_root, request.workspace, options, "job root"),
        }
    ]
    for channel, entry in sorted(request.channel_entries.items()):
        if not _CHANNEL.match(channel):
            raise ValueError(f"channel name {channel!r} is not [A-Za-z0-9_-]+; rename the input channel")
        mounts.append(
            {
                "name": WORKSPACE_VOLUME,
                "mountPath": f"{root}/input/data/{channel}",
                "subPath": workspace_subpath(entry, request.workspace, options, f"cache entry of channel {channel!r}"),
                "readOnly": True,
            }
        )
    if options.shm_size:
        # PyTorch DataLoader workers share tensors through /dev/shm, which a container gets only 64Mi of.
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}})
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return volumes, mounts


def layout_root(layout: str) -> str:
    try:
        return LAYOUT_ROOTS[layout]
    except KeyError:
        known = ", ".join(LAYOUT_ROOTS)
        raise ValueError(f"layout {layout!r} is not one of {known}; set the spec's 'layout'") from None


def pod_failure_policy() -> dict[str, Any]:
    return {
        "rules": [
            # The user's code failed or the job is invalid: retrying the pod cannot help.
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In", "values": list(USER_EXIT_CODES)},
            },
            # Evicted, preempted, node drained: not the job's fault; the replacement pod resumes from the
            # checkpoint and the disruption is not counted against backoffLimit.
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }


def spec_hash(manifest: Mapping[str, Any]) -> str:
    """Hash of what the pods would run, to tell on reattach whether the Job there came from the same spec."""
    template = manifest["spec"]["template"]
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def job_manifest(request: Any, options: KubernetesJobOptions, image: str) -> dict[str, Any]:
    """The Indexed Job of a LaunchRequest (`request` has LaunchRequest's attributes)."""
    name = kube_name(request.job_name)
    if request.instance_count < 1:
        raise ValueError(f"instance_count is {request.instance_count}; give at least 1 host")
    if not image:
        raise ValueError("image_uri is empty; set the spec's image_uri or [training] default_image")
    root = layout_root(request.layout)
    volumes, mounts = volumes_and_mounts(request, options)
    labels = job_labels(name, options.labels)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": options.image_pull_policy,
        # args, not command: the image's ENTRYPOINT (if any: GPU images set up drivers there) stays.
        "args": ["train", "--root", root],
        "env": [{"name": "TRAINING_ROOT", "value": root}, *env_vars(request.env, options, request.job_root, root)],
        "resources": resource_requirements(request.resources, options.gpu_resource),
        "volumeMounts": mounts,
        "securityContext": container_security_context(options),
        # On a failure without output/failure the last log lines become the pod's termination message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if options.env_from_secrets:
        container["envFrom"] = [{"secretRef": {"name": secret}} for secret in options.env_from_secrets]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": name,  # with completionMode Indexed: hostname <name>-<index>, DNS <name>-<index>.<name>
        "containers": [container],
        "volumes": volumes,
        "securityContext": pod_security_context(options),
        "automountServiceAccountToken": bool(options.service_account),
        "enableServiceLinks": False,  # hundreds of *_SERVICE_HOST variables only clutter the training env
    }
    if options.service_account:
        pod_spec["serviceAccountName"] = options.service_account
    if options.node_selector:
        pod_spec["nodeSelector"] = dict(options.node_selector)
    tolerations = [dict(t) for t in options.tolerations]
    gpu_tolerated = any(t.get("key") == options.gpu_resource for t in tolerations)
    if int(request.resources.get("gpu") or 0) > 0 and not gpu_tolerated:
        # GPU node pools are commonly tainted with the GPU resource name.
        tolerations.append({"key": options.gpu_resource, "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if options.priority_class:
        pod_spec["priorityClassName"] = options.priority_class
    if options.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in options.image_pull_secrets]
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": request.instance_count,
        "parallelism": request.instance_count,
        "backoffLimit": options.backoff_limit,
        "podFailurePolicy": pod_failure_policy(),
        # Never two pods of one index at once (two ranks with one name break distributed training).
        "podReplacementPolicy": "Failed",
        "template": {
            "metadata": {"labels": dict(labels), "annotations": dict(options.annotations)},
            "spec": pod_spec,
        },
    }
    if request.max_run_seconds:
        job_spec["activeDeadlineSeconds"] = int(request.max_run_seconds)
    if not options.keep_finished_jobs:
        job_spec["ttlSecondsAfterFinished"] = options.ttl_seconds_after_finished
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": options.namespace,
            "labels": labels,
            "annotations": {**options.annotations, ORIGINAL_NAME_ANNOTATION: request.job_name},
        },
        "spec": job_spec,
    }
    manifest["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = spec_hash(manifest)
    return manifest


def service_manifest(
    name: str, namespace: str, labels: Mapping[str, str] | None = None, owner_uid: str | None = None
) -> dict[str, Any]:
    """The headless Service giving the Job's pods DNS names; owned by the Job so it goes when the Job goes."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": job_labels(name, labels)}
    if owner_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": name,
                "uid": owner_uid,
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(name),
            # Peers must resolve each other while still starting (before readiness), e.g. for rendezvous.
            "publishNotReadyAddresses": True,
        },
    }


# ---- checks ---------------------------------------------------------------------------------------------


def restricted_profile_violations(pod_spec: Mapping[str, Any]) -> list[str]:
    """Where a pod spec breaks the restricted Pod Security Standard (empty = complies)."""
    problems: list[str] = []
    pod_ctx = pod_spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(flag):
            problems.append(f"spec.{flag} is true")
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"volume {volume.get('name')!r} is of type {', '.join(sorted(kinds))}")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    all_containers = list(pod_spec.get("initContainers") or []) + list(pod_spec.get("containers") or [])
    for container in all_containers:
        cname = container.get("name")
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            problems.append(f"container {cname!r} is privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"container {cname!r} does not set allowPrivilegeEscalation: false")
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        if non_root is not True:
            problems.append(f"container {cname!r} does not set runAsNonRoot: true")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"container {cname!r} runs as user 0")
        seccomp = (ctx.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"container {cname!r} has no RuntimeDefault/Localhost seccomp profile")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"container {cname!r} does not drop ALL capabilities")
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            problems.append(f"container {cname!r} adds capabilities {', '.join(sorted(extra))}")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"container {cname!r} uses hostPort {port['hostPort']}")
    return problems

"""Kubernetes manifests of a training job (the Indexed Job and its headless Service) and the restricted Pod
Security Standard check: pure functions, no I/O, no client.

One training job = one Indexed Job (a pod per host, completions = parallelism = instance_count) plus a
headless Service whose name is the pods' subdomain, so host i is reachable as ``<name>-<i>.<name>``
(Kubernetes names an Indexed Job's pods ``<job>-<index>``). ``<name>`` is derived deterministically
from ``job_name`` (the idempotency key, see ``resource_name``): a retried task or a restarted worker computes the same
name and reattaches to the Job already there instead of starting a second one.

The manifests are plain dicts in the API's camelCase form: they are what the API server receives
(the launcher posts them with the kubernetes client) and what the tests validate against the
Kubernetes OpenAPI schema with ``kubernetes-validate``. The provider's ``PodGenerator`` builds
V1Pod objects for single pods (KubernetesPodOperator) and has no notion of Indexed Jobs, pod failure
policies or the job-root/cache sub-path mounts, so the Job spec is built here. Names and labels come from
operators/launch/kubernetes/names.py, the resolved per-job options from operators/launch/kubernetes/options.py.

Credentials: only references to Kubernetes Secrets ever reach a pod spec (``secret_env`` ->
``valueFrom.secretKeyRef``, ``env_from_secrets`` -> ``envFrom.secretRef``); ``env_vars`` refuses a literal ``env``
entry that looks like a credential (:class:`SecretInEnvError`, the policy in operators/jobspec/credentials.py).

The restricted Pod Security Standard check (``restricted_profile_violations``) lists where a pod spec breaks it.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Any, Mapping

from operators.launch.container_env import CHANNEL_NAME, RESERVED_ENV, container_path, layout_root
from operators.launch.kubernetes.workload import PRIORITY_LABEL, QUEUE_LABEL
from operators.launch.base import USER_EXIT_CODES
from operators.launch.kubernetes.names import SPEC_HASH_ANNOTATION, is_env_var_name, job_labels, selector_labels
from operators.launch.names import ORIGINAL_NAME_ANNOTATION, resource_name
from operators.launch.kubernetes.options import KubernetesJobOptions
from operators.quantities import is_quantity
from operators.jobspec.credentials import SecretInEnvError, looks_like_secret
from training_runtime.contract import ROOT_ENV

CONTAINER_NAME = "train"
WORKSPACE_VOLUME = "workspace"
SHM_VOLUME = "dshm"

# The runtime's user exit codes (1-3) fail the Job at once through the pod failure policy instead of spending
# the backoff limit on them; on one host 4 (platform error) counts against backoffLimit (retried by Kubernetes).
# Several hosts are one static torch rendezvous: a replacement rank cannot join it late, so any pod failure or
# disruption fails the whole Job (backoffLimit 0) and Airflow's task retry starts the whole job again. Elastic jobs
# (torchrun's c10d rendezvous) take a replacement: each host's pod is replaced up to backoffLimitPerIndex times.
_CHANNEL = CHANNEL_NAME
_RESERVED_ENV = RESERVED_ENV

# The restricted Pod Security Standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


# ---- pieces of the pod spec ---------------------------------------------------------------------------


def _quantity(field_name: str, value: Any) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not is_quantity(text):
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


def pod_security_context(options: KubernetesJobOptions, workspace_gid: int | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": options.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if workspace_gid is not None:
        # The pod runs as another uid than the Airflow workers that write the job roots: it writes through the
        # workspace's group (the launcher makes job roots group-writable). OnRootMismatch: volumes with
        # ownership management are not re-chowned recursively at every pod start.
        context["fsGroup"] = workspace_gid
        context["fsGroupChangePolicy"] = "OnRootMismatch"
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


def env_vars(
    env: Mapping[str, str], options: KubernetesJobOptions, job_root: str | None = None, root: str | None = None
) -> list[dict[str, Any]]:
    """Literal variables (refusing credentials; job-root paths translated) followed by Secret references."""
    result: list[dict[str, Any]] = []
    for name, value in env.items():
        if job_root and root:
            value = container_path(str(value), job_root, root)
        if not is_env_var_name(name):
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


def pod_failure_policy(instance_count: int = 1, elastic: Mapping[str, int] | None = None) -> dict[str, Any]:
    return {
        "rules": [
            # The user's code failed or the job is invalid: retrying the pod cannot help.
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In", "values": list(USER_EXIT_CODES)},
            },
            # Evicted, preempted, node drained: not the job's fault. One host, or an elastic job: the replacement pod
            # resumes from the checkpoint (an elastic group re-forms with it) and the disruption is not counted against
            # the backoff limit. Several static hosts: a lone replacement rank cannot join the running rendezvous;
            # fail the Job, Airflow retries it whole.
            {"action": "Ignore" if instance_count == 1 or elastic else "FailJob",
             "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }


def backoff_limit(options: KubernetesJobOptions, instance_count: int) -> int:
    """Pod retries inside the cluster: the option for one host, none for several (see pod_failure_policy)."""
    return options.backoff_limit if instance_count == 1 else 0


def retry_policy(options: KubernetesJobOptions, instance_count: int,
                 elastic: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The Job's retry fields. Elastic: each host (index) may fail `max_restarts` times and is replaced each time
    (backoffLimitPerIndex; no Job-wide backoffLimit), a host past its limit fails the Job (maxFailedIndexes 0: the
    group cannot finish without it). Else: backoffLimit (see backoff_limit)."""
    if elastic:
        return {"backoffLimitPerIndex": int(elastic["max_restarts"]), "maxFailedIndexes": 0}
    return {"backoffLimit": backoff_limit(options, instance_count)}


def spec_hash(manifest: Mapping[str, Any]) -> str:
    """Hash of what the pods would run, to tell on reattach whether the Job there came from the same spec."""
    template = manifest["spec"]["template"]
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def job_manifest(
    request: Any, options: KubernetesJobOptions, image: str, workspace_gid: int | None = None
) -> dict[str, Any]:
    """The Indexed Job of a LaunchRequest (`request` has LaunchRequest's attributes); `workspace_gid`: the group
    owning the workspace as the Airflow side sees it (the pod's fsGroup)."""
    name = resource_name(request.job_name)
    if request.instance_count < 1:
        raise ValueError(f"instance_count is {request.instance_count}; give at least 1 host")
    if not image:
        raise ValueError("image_uri is empty; set the spec's image_uri or [training] default_image")
    root = layout_root(request.layout)
    volumes, mounts = volumes_and_mounts(request, options)
    labels = job_labels(name, options.labels)
    elastic = getattr(request, "elastic", None) or None
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": options.image_pull_policy,
        # args, not command: the image's ENTRYPOINT (if any: GPU images set up drivers there) stays.
        "args": ["train", "--root", root],
        "env": [{"name": ROOT_ENV, "value": root}, *env_vars(request.env, options, request.job_root, root)],
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
        "securityContext": pod_security_context(options, workspace_gid),
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
        **retry_policy(options, request.instance_count, elastic),
        "podFailurePolicy": pod_failure_policy(request.instance_count, elastic),
        # Never two pods of one index at once (two ranks with one name break distributed training).
        "podReplacementPolicy": "Failed",
        "template": {
            "metadata": {"labels": dict(labels), "annotations": dict(options.annotations)},
            "spec": pod_spec,
        },
    }
    if options.queue:
        # Kueue admits the Job whole (every host's pods) or not at all: it waits suspended until then, and its
        # activeDeadlineSeconds counts from admission (Kubernetes resets startTime on resume). A preemption suspends
        # it again: the Job controller deletes the pods without counting them as failures (it removes their
        # tracking finalizer first), so the pod failure policy is the same as without a queue.
        job_spec["suspend"] = True
        labels = {**labels, QUEUE_LABEL: options.queue}
        if options.queue_priority:
            labels[PRIORITY_LABEL] = options.queue_priority
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

"""The data plane in the cluster ([training.kubernetes] data_plane = cluster): the pods that move a job's bytes beside
its training, so the Airflow worker mounts no volume. Manifests only: pure functions, no I/O, no client (the runner
that submits and follows a step is operators/launch/kubernetes/steps.py).

- A *step* is one stage's work (stage code, prefetch data, write configs, restore, upload) run as a one-pod Job of the
  platform's image (`data_plane_image`, the Airflow image: the same code the worker would run). It mounts the
  workspace volume whole at `data_plane_workspace` (/workspace), under which the worker computes the job's paths too
  (operators/stages/base.py), so every path in the job's XComs means the same on both sides, whatever [training]
  workspace each Airflow worker has. Its storage credentials are the connections of the profile's `storage_secret`
  (keys `AIRFLOW_CONN_<ID>`, what Airflow reads from the environment) or, without one, the pod's own identity
  (`data_plane_service_account`: IRSA's AWS_ROLE_ARN / AWS_WEB_IDENTITY_TOKEN_FILE, GKE Workload Identity); never a
  connection of the Airflow deployment copied in by whoever triggered the run.
- The training Job gets an init container of the same image that makes the job root writable for the training's uid
  and creates the read-only channels' mount points (what the worker does on a shared volume:
  operators/launch/kubernetes/workspace.py), clears an earlier try's outcome markers and records the launch in the
  job's state directory (so a retry after ttlSecondsAfterFinished asks a step whether that launch succeeded).
- With a checkpoint_path, the checkpoint sync runs in a one-pod Job of its own (operators/engine/checkpoint_sync.py),
  created before the training Job and ended by the launcher after it: it syncs the checkpoint directory while the
  training runs and once more at the end. Never a container of the training pod: a pod shares its network namespace,
  its volumes and (EKS, GKE) its service account's identity among its containers, and the sync holds the platform's
  storage identity. It mounts the job root only, read-only, under the data plane's service account with the storage
  Secret, like a step; the training pod holds neither (`platform_identity_problems` says where one would).
- Steps run as `data_plane_uid` (not root, not the training's uid) in `workspace_group`; the training pods share that
  group (fsGroup), so what a step wrote is the training's to write and the platform state (the workspace's `state/`,
  mode 0700) is not: no training pod mounts more than its job root and its cache entries.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from operators.launch.kubernetes.manifests import (
    WORKSPACE_VOLUME,
    container_security_context,
    spec_hash,
    workspace_subpath,
)
from operators.launch.kubernetes.names import CONTROLLER_UID_LABEL, SPEC_HASH_ANNOTATION, job_labels
from operators.launch.kubernetes.options import KubernetesJobOptions
from operators.launch.kubernetes.workload import QUEUE_LABEL
from operators.launch.kubernetes.workspace import JOB_UID_ENV, WORKSPACE_COMMAND
from operators.launch.names import ORIGINAL_NAME_ANNOTATION
from operators.launch.steps import CHECKPOINT_SYNC_ENV, CHECKPOINT_SYNC_READY_FILE, STEP_ENV
from operators.state.job_state import state_dir

STEP_CONTAINER = "step"
PREPARE_CONTAINER = "prepare-job-root"
CHECKPOINT_CONTAINER = "checkpoint-sync"
CHECKPOINT_SYNC_STEP = "checkpoint_sync"
CHECKPOINT_SYNC_COMMAND = ["python3", "-m", "operators.engine.checkpoint_sync"]
# The sync's last pass after the training ended: its pod's grace period must cover it.
FINAL_SYNC_SECONDS = 300
STEP_COMPONENT = "data-plane"


def data_plane_security(options: KubernetesJobOptions) -> dict[str, Any]:
    """The platform pods' identity: their own uid, the workspace's group (restricted Pod Security profile)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": options.data_plane_uid,
        "runAsGroup": options.workspace_group,
        "fsGroup": options.workspace_group,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def workspace_mount(workspace: str, options: KubernetesJobOptions) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": WORKSPACE_VOLUME, "mountPath": workspace}
    if options.workspace_subpath:
        mount["subPath"] = options.workspace_subpath
    return mount


def storage_env_from(options: KubernetesJobOptions) -> list[dict[str, Any]]:
    return [{"secretRef": {"name": options.storage_secret}}] if options.storage_secret else []


def step_manifest(name: str, job_name: str, step: str, options: KubernetesJobOptions, *, workspace: str,
                  command: list[str], payload: Mapping[str, Any], settings_env: Mapping[str, str]) -> dict[str, Any]:
    """The one-pod Job of step `step` of job `job_name`: `command` in the platform image with `payload` as JSON in
    TRAINING_STEP and the worker's [training] settings as AIRFLOW__TRAINING__* variables."""
    env = [{"name": key, "value": str(value)} for key, value in sorted(settings_env.items())]
    env.append({"name": STEP_ENV, "value": json.dumps(payload, separators=(",", ":"), sort_keys=True)})
    container: dict[str, Any] = {
        "name": STEP_CONTAINER,
        "image": options.data_plane_image,
        "imagePullPolicy": options.image_pull_policy,
        "command": list(command),
        "env": env,
        "volumeMounts": [workspace_mount(workspace, options)],
        "securityContext": container_security_context(KubernetesJobOptions()),
        "terminationMessagePolicy": "File",
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
    }
    return platform_job(name, job_name, step, options, container)


def platform_job(name: str, job_name: str, step: str, options: KubernetesJobOptions,
                 container: dict[str, Any]) -> dict[str, Any]:
    """A one-pod Job of the platform running `container` (a step's, the checkpoint sync's) under the data plane's
    identity: its uid and group, its service account, the storage Secret's connections."""
    env_from = storage_env_from(options)
    if env_from:
        container["envFrom"] = env_from
    labels = {**job_labels(name, options.labels), "app.kubernetes.io/component": STEP_COMPONENT}
    if options.data_plane_queue:  # a namespace where Kueue holds every Job (manageJobsWithoutQueueName) admits it there
        labels[QUEUE_LABEL] = options.data_plane_queue
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": options.workspace_pvc}}],
        "securityContext": data_plane_security(options),
        "automountServiceAccountToken": bool(options.data_plane_service_account),
        "enableServiceLinks": False,
    }
    if options.data_plane_service_account:
        pod_spec["serviceAccountName"] = options.data_plane_service_account
    if options.node_selector:
        pod_spec["nodeSelector"] = dict(options.node_selector)
    if options.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in options.image_pull_secrets]
    manifest: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": options.namespace, "labels": labels,
                     "annotations": {ORIGINAL_NAME_ANNOTATION: job_name, "training-jobs/step": step}},
        "spec": {
            "backoffLimit": 0,  # a step is retried as the Airflow task it is, with its own log
            "ttlSecondsAfterFinished": options.ttl_seconds_after_finished,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
    manifest["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = spec_hash(manifest)
    return manifest


def prepare_container(job_root: str, mount_points: list[str], workspace: str, state: str,
                      options: KubernetesJobOptions) -> dict[str, Any]:
    """The training Job's init container: the job root group-writable, the channels' mount points made, an
    earlier try's outcome markers cleared, the launch recorded in the job's state directory `state`
    (operators/launch/kubernetes/workspace.py's command line)."""
    return {
        "name": PREPARE_CONTAINER,
        "image": options.data_plane_image,
        "imagePullPolicy": options.image_pull_policy,
        "command": [*WORKSPACE_COMMAND, "prepare", "--state", state, job_root, *mount_points],
        "env": [{"name": JOB_UID_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{CONTROLLER_UID_LABEL}']"}}}],
        "volumeMounts": [workspace_mount(workspace, options)],
        "securityContext": {**container_security_context(KubernetesJobOptions()),
                            "runAsUser": options.data_plane_uid, "runAsGroup": options.workspace_group},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }


def checkpoint_sync_manifest(name: str, request: Any, options: KubernetesJobOptions,
                             settings_env: Mapping[str, str], *, mark_existing: bool) -> dict[str, Any]:
    """The checkpoint sync's own one-pod Job for the training of `request` (LaunchRequest's attributes; its
    `checkpoints`: {"dir", "uri", "job_root", "interval", "connections"}). `mark_existing`: what is in the checkpoint
    directory now was restored and is not uploaded back (a new training); else (a training already running) all of
    it is. Ready (its readiness probe) once it knows; its grace period covers the last pass."""
    env = [{"name": key, "value": str(value)} for key, value in sorted(settings_env.items())]
    config = {**dict(request.checkpoints), "mark_existing": mark_existing}
    env.append({"name": CHECKPOINT_SYNC_ENV, "value": json.dumps(config, sort_keys=True)})
    container: dict[str, Any] = {
        "name": CHECKPOINT_CONTAINER,
        "image": options.data_plane_image,
        "imagePullPolicy": options.image_pull_policy,
        "command": list(CHECKPOINT_SYNC_COMMAND),
        "env": env,
        # The job root only, read-only, at the path the configuration names: it reads checkpoints and nothing else
        # (not the workspace's state/, not another job's root).
        "volumeMounts": [{"name": WORKSPACE_VOLUME, "mountPath": request.job_root, "readOnly": True,
                          "subPath": workspace_subpath(request.job_root, request.workspace, options, "job root")}],
        "readinessProbe": {"exec": {"command": ["test", "-e", CHECKPOINT_SYNC_READY_FILE]}, "periodSeconds": 1},
        "securityContext": container_security_context(KubernetesJobOptions()),
        "terminationMessagePolicy": "File",
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
    }
    manifest = platform_job(name, request.job_name, CHECKPOINT_SYNC_STEP, options, container)
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = FINAL_SYNC_SECONDS
    if request.max_run_seconds and not options.queue:
        # A bound if nothing ends it (the worker gone before the training Job became its owner): the training's own
        # limit, its start and the last pass. A queued training may wait longer than that: its ownership bounds it.
        manifest["spec"]["activeDeadlineSeconds"] = (int(request.max_run_seconds) + options.startup_timeout_seconds
                                                     + FINAL_SYNC_SECONDS)
    manifest["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = spec_hash(manifest)
    return manifest


def platform_identity_problems(pod_spec: Mapping[str, Any], options: KubernetesJobOptions) -> list[str]:
    """Where a training pod would hold the platform's storage identity: the data plane's service account (its token,
    and on EKS / GKE its cloud role, reach every container of the pod) or the storage Secret (an env, envFrom or volume
    of any of its containers). Empty: it holds neither."""
    problems = []
    account = options.data_plane_service_account
    if account and pod_spec.get("serviceAccountName") == account:
        problems.append(f"its service account is {account}, the data plane's (data_plane_service_account)")
    secret = options.storage_secret
    if not secret:
        return problems
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        named = [source.get("secretRef", {}).get("name") for source in container.get("envFrom") or []]
        named += [(var.get("valueFrom") or {}).get("secretKeyRef", {}).get("name") for var in container.get("env") or []]
        if secret in named:
            problems.append(f"container {container.get('name')!r} reads the storage Secret {secret}")
    for volume in pod_spec.get("volumes") or []:
        named = [(volume.get("secret") or {}).get("secretName")]
        named += [(source.get("secret") or {}).get("name") for source in (volume.get("projected") or {}).get("sources")
                  or []]
        if secret in named:
            problems.append(f"volume {volume.get('name')!r} holds the storage Secret {secret}")
    return problems


def refuse_platform_identity(manifest: Mapping[str, Any], options: KubernetesJobOptions) -> None:
    """ValueError, one line, if the training Job `manifest` would hold the platform's storage identity."""
    problems = platform_identity_problems(manifest["spec"]["template"]["spec"], options)
    if problems:
        raise ValueError(f"the training pod of {manifest['metadata']['name']} would hold the platform's storage "
                         f"identity: {'; '.join(problems)}; give the training a service account and Secrets of its own")


def with_data_plane(manifest: dict[str, Any], request: Any, mount_points: list[str],
                    options: KubernetesJobOptions) -> dict[str, Any]:
    """The training Job of `request` (LaunchRequest's attributes) with the container the cluster's data plane needs in
    it: the job root's preparation (its checkpoint sync is a Job of its own: checkpoint_sync_manifest)."""
    pod = manifest["spec"]["template"]["spec"]
    state = state_dir(request.workspace, request.job_name)
    pod["initContainers"] = [prepare_container(request.job_root, mount_points, request.workspace, state, options)]
    manifest["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = spec_hash(manifest)
    return manifest

"""Launch backend `kubernetes`: one Indexed Job (a pod per host) and a headless Service per training job.

Protocol (operators/launch/base.py): Launcher and, declared in its capabilities, DeferrableLauncher
(start() -> trigger() -> result_from_event()), the default way to wait.

Built on the cncf-kubernetes provider: KubernetesHook (connection `[training.kubernetes] conn_id`: a
kubeconfig path/content, in-cluster, or the default kubeconfig) gives the API clients and the job reads
with the provider's retry policy; AsyncKubernetesHook drives the waiting; the provider's image-pull
error judgement decides what fails fast. Written here, and why:
  - the manifests (operators/launch/kubernetes/manifests.py): the provider builds single pods, not Indexed Jobs
    with a pod failure policy, a headless Service and sub-path mounts of a shared workspace;
  - creating the Job: KubernetesHook.create_job retries HTTP 409 as a transient error (five attempts with
    backoff) while for us 409 AlreadyExists is the normal signal to reattach to the Job a previous try
    or a restarted worker created;
  - the watch (operators/launch/kubernetes/watch.py) the trigger (operators/launch/kubernetes/trigger.py) runs:
    see its docstring;
  - the end-of-job log catch-up (operators/launch/kubernetes/pod_logs.py): the provider's PodManager logs through
    its own logger and re-reads by whole seconds (since_seconds), which can drop or repeat lines; we resume after
    the exact (nanosecond timestamp, count) cursor the watch left.

Lifecycle: names derive from job_name (resource_name), so a retried task computes the same Job name.
start(): create -> 409 -> read the Job there: running or complete -> reattach (no second Job); failed ->
delete it and start afresh (a retry must run again, not report the old failure); being deleted ->
wait until it is gone. The Service is owned by the Job, so ttlSecondsAfterFinished (or any deletion
of the Job) removes it too. stop() deletes the Job (propagation Foreground by default), its pods and the
Service (and the Job's Secret, operators/launch/kubernetes/secrets.py). When the watch gives up before Kubernetes has finished the Job (image error, OOM, missing
Secret), result_from_event() deletes it so nothing keeps retrying in the cluster. The job root side (group-
writable tree, mount points, the launch record that lets a retry after ttlSecondsAfterFinished report a success
instead of training again): operators/launch/kubernetes/workspace.py. With a Kueue queue ([training.kubernetes]
queue, operators/launch/kubernetes/queues.py) the Job is created suspended and Kueue admits it whole; the watch reports
its place in the queue (operators/launch/kubernetes/workload.py). The result names the training pod's imageID
(image_digest, from the watch's event); a request pinned to another image (expected_image_digest) is stopped by the
watch as an image error.
"""

from __future__ import annotations

import asyncio
import os
from functools import cached_property
from typing import Any, Mapping

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from airflow.providers.common.compat.sdk import BaseHook
from kubernetes.client.rest import ApiException

from operators.launch.base import (
    DEFAULT_MASTER_PORT,
    PLATFORM_ERROR,
    LaunchRequest,
    LaunchResult,
    LineCallback,
    is_runtime_exit_code,
)
from operators.launch.kubernetes.api import (
    KubernetesLaunchError,
    api_error,
    delete_job,
    ensure_service,
    finished_state,
    read_job,
    wait_deleted,
)
from operators.launch.kubernetes.checkpoint_sync import CheckpointSyncJob
from operators.launch.kubernetes.declaration import DECLARATION, cluster_workspace
from operators.launch.kubernetes.data_plane import refuse_platform_identity, with_data_plane
from operators.launch.kubernetes.manifests import (
    job_manifest,
    restricted_profile_violations,
)
from operators.launch.kubernetes.names import SPEC_HASH_ANNOTATION, host_names
from operators.launch.kubernetes.options import KubernetesJobOptions, resolve_options
from operators.launch.kubernetes.pod_logs import catch_up_logs
from operators.launch.kubernetes.secrets import JobSecret, with_secret_env
from operators.launch.kubernetes.steps import ClusterStep, succeeded_in_cluster
from operators.launch.kubernetes.watch import JobWatch
from operators.launch.kubernetes.workspace import (
    prepare_job_root,
    succeeded_since_launch,
    workspace_group,
    write_launch_record,
)
from operators.launch.names import JOB_LABEL, ORIGINAL_NAME_ANNOTATION, resource_name
from operators.launch.outcome import clear_outcome_markers, read_failure_reason
from operators.launch.kubernetes.settings import kubernetes_settings
from operators.settings import training_settings, training_settings_env
from operators.state.job_state import state_dir

__all__ = ["KubernetesLauncherHook", "KubernetesLaunchError"]


def _check_hosts(request: LaunchRequest, expected: list[str]) -> None:
    """resourceconfig.json must list the names the pods really get, or peers cannot find each other."""
    if request.hosts and list(request.hosts) != expected:
        raise ValueError(
            f"the job's hosts {list(request.hosts)} are not this backend's host names {expected}; "
            "write resourceconfig.json with the launcher's hosts(job_name, instance_count)"
        )


class KubernetesLauncherHook(BaseHook):
    """Runs a LaunchRequest as an Indexed Job + headless Service; see the module docstring."""

    backend = "kubernetes"
    # Cache entries are sub-path mounts, read-only, at input/data/<channel>.
    capabilities = DECLARATION.capabilities  # operators/launch/kubernetes/declaration.py

    def __init__(self, settings: Any | None = None, default_image: str | None = None) -> None:
        super().__init__()
        self._settings = settings
        self._default_image = default_image

    # ---- configuration --------------------------------------------------------------------------------
    @cached_property
    def settings(self):
        if self._settings is not None:
            return self._settings
        return kubernetes_settings()

    @cached_property
    def kube(self):
        return KubernetesHook(conn_id=self.settings.conn_id or None)

    def async_kube(self):
        """The async hook for blocking mode, given the connection extras the sync hook has read already."""
        return AsyncKubernetesHook(conn_id=self.kube.conn_id, connection_extras=dict(self.kube.conn_extras))

    @property
    def deferrable_default(self) -> bool:
        """[training.kubernetes] deferrable: wait in the triggerer unless the operator says otherwise."""
        return bool(self.settings.deferrable)

    def options(self, request: LaunchRequest) -> KubernetesJobOptions:
        return resolve_options(request.options, self.settings)

    def image(self, request: LaunchRequest) -> str:
        if request.image_uri:
            return request.image_uri
        if self._default_image:
            return self._default_image
        return training_settings().default_image

    def job_manifest(self, request: LaunchRequest) -> dict[str, Any]:
        # Secrets by reference: only a secretKeyRef per variable, the values go into the Job's Secret.
        options = with_secret_env(self.options(request), resource_name(request.job_name), request.secret_env)
        if not options.in_cluster:
            manifest = job_manifest(request, options, self.image(request), workspace_group(request.job_root))
        else:
            manifest = with_data_plane(job_manifest(request, options, self.image(request), options.workspace_group),
                                       request, self._mount_points(request), options)
        refuse_platform_identity(manifest, options)  # the profile and validate_spec refuse it first: a last guard
        return manifest

    @staticmethod
    def _mount_points(request: LaunchRequest) -> list[str]:
        return [os.path.join(request.job_root, "input", "data", channel) for channel in request.channel_entries]

    def cluster_workspace(self, options: Mapping[str, Any]) -> str | None:
        """Where the job's files are when its profile keeps its bytes in the cluster (data_plane = cluster): where the
        platform pods mount the volume, whatever this worker's [training] workspace; None: this worker's."""
        return cluster_workspace(options, self.settings)

    def cluster_step(self, job_name: str, options: Mapping[str, Any], step: str,
                     on_line: LineCallback) -> ClusterStep | None:
        """The runner of a stage's step in the cluster when the job's profile keeps the data plane there
        (operators/launch/kubernetes/data_plane.py), else None: the stage works on the worker's workspace."""
        resolved = resolve_options(options, self.settings)
        return ClusterStep(self.kube, resolved, job_name, step, on_line=on_line) if resolved.in_cluster else None

    # ---- the protocol ---------------------------------------------------------------------------------
    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        return host_names(resource_name(job_name), instance_count)

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str] | None:
        return None  # the headless Service gives every host a DNS name

    def master_port(self) -> int:
        return DEFAULT_MASTER_PORT  # every pod has its own network namespace: no collisions

    def start(self, request: LaunchRequest) -> None:
        """Create the Job and its Service, or reattach to the Job a previous try created."""
        _check_hosts(request, self.hosts(request.job_name, request.instance_count))
        options = self.options(request)
        manifest = self.job_manifest(request)
        name, namespace = manifest["metadata"]["name"], options.namespace
        on_volume = not options.in_cluster  # else the Job's init container does the job root's part
        # In the cluster the question costs a step's pod: asked by retries only (a first try has launched nothing).
        if (on_volume or request.attempt > 1) and read_job(self.kube, name, namespace) is None \
                and self._succeeded_since_launch(request, options):
            self.log.info(
                "Job %s/%s is gone (ttlSecondsAfterFinished) but the job root's success marker is newer than its "
                "launch: it succeeded; reporting that instead of training again", namespace, name)
            return
        if on_volume:  # mount points the kubelet would otherwise create as root, a job root the pods' uid can write
            prepare_job_root(request.job_root, self._mount_points(request))
        problems = restricted_profile_violations(manifest["spec"]["template"]["spec"])
        if problems:
            self.log.warning("Job %s does not meet the restricted Pod Security profile (%s); namespaces enforcing "
                             "it will refuse its pods", name, "; ".join(problems))
        batch = self.kube.batch_v1_client
        # Secrets by reference: a Secret, then the Job, then the Job becomes its owner (see operators/launch/kubernetes/secrets.py).
        secret = JobSecret(self.kube.core_v1_client, name, namespace, options.labels) if request.secret_env else None
        sync = self._checkpoint_sync(request, options)  # in a pod of its own, ready before the training starts
        for _ in range(5):
            if (secret, sync) != (None, None) and read_job(self.kube, name, namespace) is None:
                if secret is not None:
                    secret.put(request.secret_env)
                if sync is not None:
                    sync.start()
            try:
                created = batch.create_namespaced_job(namespace=namespace, body=manifest)
            except ApiException as err:
                if err.status != 409:
                    raise api_error(f"create Job {name}", namespace, err) from None
            else:
                if sync is not None:
                    sync.adopt(created.metadata.uid)
                if secret is not None:
                    secret.adopt(created.metadata.uid, request.secret_env)
                    self.log.info("Secrets %s: in Secret %s/%s, owned by the Job", ", ".join(sorted(
                        request.secret_env)), namespace, secret.secret)
                if on_volume:
                    clear_outcome_markers(request.job_root)
                    write_launch_record(state_dir(request.workspace, request.job_name), created.metadata.uid)
                self.log.info("Created Job %s/%s: %d host(s) %s, image %s", namespace, name, request.instance_count,
                              ", ".join(self.hosts(request.job_name, request.instance_count)),
                              manifest["spec"]["template"]["spec"]["containers"][0]["image"])
                if options.queue:
                    self.log.info("Job %s/%s waits suspended in Kueue queue %s%s until all %d host(s) are admitted",
                                  namespace, name, options.queue,
                                  f" (priority {options.queue_priority})" if options.queue_priority else "",
                                  request.instance_count)
                ensure_service(self.kube.core_v1_client, name, namespace, options.labels, created.metadata.uid)
                return
            existing = read_job(self.kube, name, namespace)
            if existing is None:
                continue  # deleted in between: create it again
            self._check_ownership(existing, request, manifest)
            if existing.metadata.deletion_timestamp:
                self.log.info("Job %s/%s from an earlier try is being deleted; waiting for it to go", namespace, name)
                wait_deleted(self.kube, name, namespace)
                continue
            state = finished_state(existing)
            if state == "Failed":
                self.log.info("Job %s/%s from an earlier try failed; deleting it to start the training afresh",
                              namespace, name)
                self._delete(name, namespace, "Foreground")
                wait_deleted(self.kube, name, namespace)
                continue
            self.log.info(
                "Reattaching to Job %s/%s (created %s, %s): a retry or restarted worker does not start a second one",
                namespace,
                name,
                existing.metadata.creation_timestamp,
                "already complete" if state == "Complete" else
                "waiting suspended in its Kueue queue" if existing.spec.suspend else "still running",
            )
            if secret is not None:
                secret.adopt(existing.metadata.uid, request.secret_env)  # the Secret there, never a second one
            if sync is not None:
                sync.ensure()
                sync.adopt(existing.metadata.uid)
            ensure_service(self.kube.core_v1_client, name, namespace, options.labels, existing.metadata.uid)
            return
        raise KubernetesLaunchError(
            f"Job {namespace}/{name} kept appearing and disappearing while starting; check who else manages it"
        )

    trigger_class = "operators.launch.kubernetes.trigger:KubernetesTrainingJobTrigger"

    def trigger_arguments(self, request: LaunchRequest) -> dict[str, Any]:
        options = self.options(request)
        return dict(
            name=resource_name(request.job_name),
            namespace=options.namespace,
            instance_count=request.instance_count,
            kubernetes_conn_id=self.settings.conn_id or None,
            **options.waiting(),
            propagation_policy=options.propagation_policy,
            metric_definitions=[dict(m) for m in request.metric_definitions],
            has_secret=bool(request.secret_env),
            metrics_echoed=options.in_cluster,
            expected_image_digest=request.expected_image_digest,
            **self._kubeconfig_file(),
        )

    def queue_of(self, request: LaunchRequest) -> dict[str, str] | None:
        """The Kueue queue and priority the Job waits in (see DeferrableLauncher.queue_of), or None."""
        options = self.options(request)
        return {"queue": options.queue, "priority": options.queue_priority} if options.queue else None

    def _kubeconfig_file(self) -> dict[str, str]:
        """The connection's kubeconfig path and context, when that is how it connects (see the trigger)."""
        extras = self.kube.conn_extras or {}
        path = extras.get("kube_config_path") or extras.get("extra__kubernetes__kube_config_path")
        if not path or extras.get("kube_config") or extras.get("in_cluster"):
            return {}
        context = extras.get("cluster_context") or extras.get("extra__kubernetes__cluster_context")
        return {"kube_config_path": str(path), "cluster_context": str(context) if context else None}

    def run(self, request: LaunchRequest, on_line: LineCallback) -> LaunchResult:
        """Blocking: start or reattach, stream the pods' logs into on_line, wait, return the result."""
        self.start(request)
        options = self.options(request)
        watch = JobWatch(
            self.async_kube(),
            name=resource_name(request.job_name),
            namespace=options.namespace,
            instance_count=request.instance_count,
            **options.waiting(),
            emit=on_line,
            expected_image_digest=request.expected_image_digest,
        )
        event = asyncio.run(watch.run())
        return self.result_from_event(request, event, on_line)

    def result_from_event(self, request: LaunchRequest, event: Mapping[str, Any], on_line: LineCallback) -> LaunchResult:
        result = self._result_of(request, event, on_line)
        sync = self._checkpoint_sync(request, self.options(request), on_line)
        if sync is not None:  # the training is over: the sync's last pass, its lines into the task's log
            sync.finish()
        return result

    def _result_of(self, request: LaunchRequest, event: Mapping[str, Any], on_line: LineCallback) -> LaunchResult:
        if not isinstance(event, Mapping) or event.get("status") not in ("success", "failed"):
            raise KubernetesLaunchError(f"unexpected trigger event {event!r} for job {request.job_name}")
        name = resource_name(request.job_name)
        options = self.options(request)
        on_volume = not options.in_cluster
        if event.get("job_missing") and not getattr(self, "_stopped", False) and \
                self._succeeded_since_launch(request, options):
            on_line(f"[kubernetes] Job {name} finished and was removed after ttlSecondsAfterFinished; "
                    "its success marker says it succeeded")
            return LaunchResult(succeeded=True, exit_code=0)
        # The lines each pod wrote after the watch's cursor (a follow stream can miss the last ones).
        catch_up_logs(self.kube.core_v1_client, event.get("namespace") or options.namespace, event.get("name") or name,
                      event.get("pods") or {}, event.get("log_cursors") or {}, request.instance_count, on_line,
                      self.log.warning)
        if event.get("job_missing") and getattr(self, "_stopped", False):
            # stop() (on_kill, early stopping) deleted it while run() watched: say so, not "deleted outside Airflow".
            return LaunchResult(succeeded=False, failure_class=PLATFORM_ERROR,
                                failure_reason=f"stopped by this task (killed, or stopped early): Job {name} and its "
                                               "pods were deleted", image_digest=event.get("image_digest"))
        if event["status"] == "success":
            on_line(f"[kubernetes] Job {name} completed on {request.instance_count} host(s)")
            return LaunchResult(succeeded=True, exit_code=0, restarts=dict(event.get("restarts") or {}),
                                image_digest=event.get("image_digest"))
        if not event.get("job_finished", True):
            on_line(f"[kubernetes] stopping Job {name}: {event['failure_class']} is not worth retrying in the cluster")
            self.stop(request)
        message = event.get("message") or "the training Job failed"
        # The runtime's reason: output/failure, or (no volume here) the termination message it wrote too.
        reason = read_failure_reason(request.job_root) if on_volume and is_runtime_exit_code(event.get("exit_code")) \
            else None
        reason = reason or event.get("detail")
        return LaunchResult(
            succeeded=False,
            exit_code=event.get("exit_code"),
            failure_reason=f"{message}: {reason}" if reason else message,
            failure_class=event.get("failure_class"),
            restarts=dict(event.get("restarts") or {}),
            image_digest=event.get("image_digest"),
        )

    def stop(self, request: LaunchRequest) -> None:
        """on_kill: delete the Job, its pods and the Service; what is already gone is fine."""
        options = self.options(request)
        self._stopped = True
        self._delete(resource_name(request.job_name), options.namespace, options.propagation_policy)
        if (sync := self._checkpoint_sync(request, options)) is not None:
            sync.delete()  # SIGTERM: its last pass, unfollowed

    # ---- helpers --------------------------------------------------------------------------------------
    def _checkpoint_sync(self, request: LaunchRequest, options: KubernetesJobOptions,
                         on_line: LineCallback | None = None) -> CheckpointSyncJob | None:
        """The checkpoint sync's Job, where the cluster keeps the data plane and the job has a checkpoint_path."""
        if not (options.in_cluster and request.checkpoints):
            return None
        return CheckpointSyncJob(self.kube, options, request, training_settings_env(request.workspace),
                                 on_line=on_line or (lambda line: self.log.info("%s", line)))

    def _succeeded_since_launch(self, request: LaunchRequest, options: KubernetesJobOptions) -> bool:
        """The runtime's success marker is newer than the job's last launch (operators/launch/kubernetes/workspace.py):
        read here on a shared volume, by a step in the cluster where the data plane is the cluster's."""
        state = state_dir(request.workspace, request.job_name)
        if not options.in_cluster:
            return succeeded_since_launch(request.job_root, state)
        return succeeded_in_cluster(self.kube, options, request.job_name, request.job_root, state,
                                    on_line=lambda line: self.log.info("%s", line))

    def _check_ownership(self, existing: Any, request: LaunchRequest, manifest: Mapping[str, Any]) -> None:
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        labels = existing.metadata.labels or {}
        annotations = existing.metadata.annotations or {}
        made_for = annotations.get(ORIGINAL_NAME_ANNOTATION, request.job_name)
        if labels.get(JOB_LABEL) != name or made_for != request.job_name:
            raise KubernetesLaunchError(
                f"a Job named {name} exists in namespace {namespace} but was not created for training job "
                f"{request.job_name!r}; give the job another job_name or delete that Job"
            )
        this_spec = manifest["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        if annotations.get(SPEC_HASH_ANNOTATION) not in (None, this_spec):
            self.log.warning(
                "Job %s/%s was created from a different spec than this try's (job_name is the idempotency key); "
                "reattaching to it anyway. Use a new job_name to run a changed job.",
                namespace,
                name,
            )

    def _delete(self, name: str, namespace: str, propagation_policy: str) -> None:
        delete_job(self.kube.core_v1_client, self.kube.batch_v1_client, name, namespace, propagation_policy)
        self.log.info(
            "Deleted Job %s/%s (propagation %s), its pods, its Service and its Secret", namespace, name, propagation_policy
        )

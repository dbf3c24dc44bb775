"""The checkpoint sync of a training Job whose data plane is the cluster's, in a one-pod Job of its own (the manifest:
operators/launch/kubernetes/data_plane.py's checkpoint_sync_manifest; what runs in it:
operators/engine/checkpoint_sync.py), driven by the launcher:

- start(): before a new training Job, a fresh sync (one an earlier try left is ended first); it returns once the
  sync's pod is ready, i.e. knows which checkpoints were restored, so the training's first checkpoint is never taken
  for one of those;
- ensure(): beside a training Job already there (a retried task, a restarted worker reattaching), its sync, or a new
  one that uploads everything in the checkpoint directory;
- adopt(): the training Job becomes the sync Job's owner, so deleting it (ttlSecondsAfterFinished, a user) ends the
  sync too (SIGTERM: its last pass);
- finish(): after the training, the sync Job is deleted (SIGTERM: the last pass, within its grace period) and its
  log, followed to its end, goes into the task's log, which says whether the last pass was done.

It is a data-plane step that runs for the training's lifetime: ClusterStep's submission, waiting and deletion.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from kubernetes.client.rest import ApiException

from operators.launch.kubernetes.api import KubernetesLaunchError, api_error, finished_state
from operators.launch.kubernetes.data_plane import (
    CHECKPOINT_CONTAINER,
    CHECKPOINT_SYNC_STEP,
    FINAL_SYNC_SECONDS,
    checkpoint_sync_manifest,
)
from operators.launch.kubernetes.options import KubernetesJobOptions
from operators.launch.kubernetes.secrets import owner_reference
from operators.launch.kubernetes.steps import ClusterStep, _container_status, _poll_pause, log_lines
from operators.launch.names import resource_name
from operators.launch.steps import CHECKPOINT_SYNC_DONE


class CheckpointSyncJob(ClusterStep):
    container = CHECKPOINT_CONTAINER

    def __init__(self, kube: Any, options: KubernetesJobOptions, request: Any, settings_env: Mapping[str, str], *,
                 on_line: Callable[[str], None]) -> None:
        super().__init__(kube, options, request.job_name, CHECKPOINT_SYNC_STEP, on_line=on_line)
        self.request, self.settings_env = request, settings_env

    def start(self) -> None:
        if self._read_job() is not None or self._pods():
            self.on_line(f"[cluster] checkpoint sync: Job {self.name} of an earlier try is there; ending it to start "
                         "afresh")
            self.delete()
            self._wait_deleted()
        self._create(mark_existing=True)
        self._wait_ready()

    def ensure(self) -> None:
        job = self._read_job()
        if job is not None and not job.metadata.deletion_timestamp and finished_state(job) is None:
            return
        if job is not None:
            self.delete()
            self._wait_deleted()
        self.on_line(f"[cluster] checkpoint sync: none runs beside the training Job there; starting one that uploads "
                     f"every checkpoint to {self.request.checkpoints['uri']}")
        self._create(mark_existing=False)

    def adopt(self, owner_uid: str) -> None:
        patch = {"metadata": {"ownerReferences": [owner_reference(resource_name(self.job_name), owner_uid)]}}
        try:
            self.kube.batch_v1_client.patch_namespaced_job(self.name, self.namespace, patch)
        except ApiException as err:
            raise api_error(f"set the owner of checkpoint sync Job {self.name}", self.namespace, err) from None

    def finish(self) -> None:
        pods = [pod.metadata.name for pod in self._pods()]
        self.delete()  # SIGTERM to its pod: the last pass
        if not pods:
            self.on_line(f"[cluster] checkpoint sync: its Job {self.name} was gone already (deleted with the training "
                         f"Job); checkpoints written after its last pass may be missing from "
                         f"{self.request.checkpoints['uri']}")
            return
        done = any([self._follow_to_end(pod) for pod in pods])
        if done:
            self.on_line(f"[cluster] checkpoint sync: every checkpoint is in {self.request.checkpoints['uri']}")
        else:
            self.on_line(f"[cluster] checkpoint sync: its last pass did not finish (see its lines above); checkpoints "
                         f"written at the end may be missing from {self.request.checkpoints['uri']}")

    # ---- helpers ---------------------------------------------------------------------------------------------
    def _create(self, *, mark_existing: bool) -> None:
        manifest = checkpoint_sync_manifest(self.name, self.request, self.options, self.settings_env,
                                            mark_existing=mark_existing)
        try:
            self.kube.batch_v1_client.create_namespaced_job(namespace=self.namespace, body=manifest)
        except ApiException as err:
            raise api_error(f"create checkpoint sync Job {self.name}", self.namespace, err) from None
        self.on_line(f"[cluster] checkpoint sync: Job {self.namespace}/{self.name} created (image "
                     f"{self.options.data_plane_image}, the data plane's identity, the job root read-only)")

    def _wait_ready(self) -> None:
        """Until the sync's pod is ready (it knows what was restored): fails on what waiting cannot cure, a sync
        that ended, or the start timeout."""
        pod = self._wait_for_pod()
        started = time.monotonic()
        while True:
            pods = self.kube.core_v1_client.list_namespaced_pod(
                self.namespace, field_selector=f"metadata.name={pod.metadata.name}").items
            status = _container_status(pods[0], self.container) if pods else None
            if status is not None and status.ready:
                self.on_line(f"[cluster] checkpoint sync: pod {pod.metadata.name} ready")
                return
            ended = status.state.terminated if status is not None and status.state else None
            if not pods or ended is not None:
                raise KubernetesLaunchError(
                    f"the checkpoint sync of {self.job_name} (pod {pod.metadata.name}) ended before it was ready "
                    f"(exit code {getattr(ended, 'exit_code', None)}): {self._log_tail(pod.metadata.name)}")
            if time.monotonic() - started > self.options.startup_timeout_seconds:
                self.delete()
                raise KubernetesLaunchError(f"the checkpoint sync of {self.job_name} was not ready within "
                                            f"{self.options.startup_timeout_seconds} s; see its pod {pod.metadata.name}")
            time.sleep(_poll_pause(time.monotonic() - started))

    def _log_tail(self, pod: str) -> str:
        try:
            return self.kube.core_v1_client.read_namespaced_pod_log(
                pod, self.namespace, container=self.container, tail_lines=5).strip().replace("\n", " | ")
        except ApiException as err:
            return f"its log cannot be read ({err.status} {err.reason})"

    def _follow_to_end(self, pod: str) -> bool:
        """Pass the log of the sync's pod on until its container ends (the pod goes); whether the last pass was done."""
        seen, done = 0, False
        deadline = time.monotonic() + FINAL_SYNC_SECONDS + 60  # a hang guard: the grace period ends it before
        while time.monotonic() < deadline:
            count = 0
            try:
                response = self.kube.core_v1_client.read_namespaced_pod_log(
                    pod, self.namespace, container=self.container, follow=True, _preload_content=False)
                for line in log_lines(response):
                    count += 1
                    if count > seen:
                        self.on_line(f"[checkpoint-sync] {line}")
                        done = done or line.endswith(CHECKPOINT_SYNC_DONE)
            except Exception:  # noqa: BLE001 - gone, or the stream broke or stalled (the API's, urllib3's or
                pass  # the socket's error, whichever layer saw it): the pod is asked about below, the stream opened again
            seen = max(seen, count)
            remaining = self.kube.core_v1_client.list_namespaced_pod(
                self.namespace, field_selector=f"metadata.name={pod}").items
            status = _container_status(remaining[0], self.container) if remaining else None
            if not remaining or (status is not None and status.state and status.state.terminated):
                return done
            time.sleep(1)
        return done

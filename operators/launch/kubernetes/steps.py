"""Runs one data-plane step in the cluster and follows it (the manifests: operators/launch/kubernetes/data_plane.py).

submit -> wait for its pod -> stream its log into the Airflow task's log, line by line -> read its result from the
container's termination message (written by the platform's own code in the pod, so no log line of the job's can
forge it). The step Job's name derives from the job's and the step's, so a retried task or a restarted worker finds
the step there: a running one is followed again (never a second one), a finished one is deleted and run afresh (a
retry must do the work again, its result may be stale).

Synchronous on purpose: a step is seconds to minutes of bytes moving, the task would hold its slot either way.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Mapping

from kubernetes.client import V1DeleteOptions
from kubernetes.client.rest import ApiException

from operators.launch.base import is_rate_limited
from operators.launch.kubernetes.api import (
    KubernetesLaunchError,
    api_error,
    finished_state,
)
from operators.launch.kubernetes.data_plane import STEP_CONTAINER, step_manifest
from operators.launch.kubernetes.names import SPEC_HASH_ANNOTATION
from operators.launch.kubernetes.pods import config_error_is_permanent
from operators.launch.kubernetes.options import KubernetesJobOptions
from operators.launch.kubernetes.workload import QUEUE_LABEL
from operators.launch.kubernetes.workspace import WORKSPACE_COMMAND
from operators.launch.names import resource_name
from operators.launch.steps import StepError, StepOutcome

log = logging.getLogger(__name__)

DELETE_WAIT_SECONDS = 120
NO_POD_SECONDS = 5  # a step's Job without a pod after this long is asked why once (Kueue holds it suspended)
# Waiting reasons that no waiting cures: the step cannot start (its image, its Secret; a config error only when the
# object or key is missing: pods.config_error_is_permanent).
STUCK_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError")
# How often the step's pod is read while it starts and once its log has ended: a step lives seconds, so each poll's
# half interval shows in its wall time; polls (not a watch) keep the launcher's Role without `watch` on pods.
FAST_POLL_SECONDS, SLOW_POLL_SECONDS, FAST_POLL_FOR = 0.2, 1.0, 10.0


def _poll_pause(waited: float) -> float:
    """The pause before the next read: fast for the first seconds (a pod starts in 1-3 s), then slow (an image
    pull, a queue) so a long wait costs the API server little."""
    return FAST_POLL_SECONDS if waited < FAST_POLL_FOR else SLOW_POLL_SECONDS


def step_name(job_name: str, step: str) -> str:
    return resource_name(f"{job_name}-{step.replace('_', '-')}")


class ClusterStep:
    """One step of one job, on the clients of a KubernetesHook (`kube`)."""

    container = STEP_CONTAINER  # the name of the pod's one container

    def __init__(self, kube: Any, options: KubernetesJobOptions, job_name: str, step: str, *,
                 on_line: Callable[[str], None]) -> None:
        self.kube, self.options, self.job_name, self.step = kube, options, job_name, step
        self.name = step_name(job_name, step)
        self.namespace = options.namespace
        self.on_line = on_line

    def run(self, *, workspace: str, command: list[str], payload: Mapping[str, Any],
            settings_env: Mapping[str, str]) -> StepOutcome:
        manifest = step_manifest(self.name, self.job_name, self.step, self.options, workspace=workspace,
                                 command=command, payload=payload, settings_env=settings_env)
        self._submit(manifest)
        pod = self._wait_for_pod()
        self._stream_log(pod)
        return self._outcome(pod)

    def delete(self) -> None:
        """Stop the step (on_kill): its Job and pod go; what is gone already is fine."""

        try:
            self.kube.batch_v1_client.delete_namespaced_job(
                self.name, self.namespace, body=V1DeleteOptions(propagation_policy="Background"))
        except ApiException as err:
            if err.status != 404:
                raise api_error(f"delete step Job {self.name}", self.namespace, err) from None

    # ---- submit ----------------------------------------------------------------------------------------------
    def _submit(self, manifest: Mapping[str, Any]) -> None:
        batch = self.kube.batch_v1_client
        for _ in range(5):
            try:
                batch.create_namespaced_job(namespace=self.namespace, body=manifest)
                self.on_line(f"[cluster] step {self.step}: Job {self.namespace}/{self.name} created, image "
                             f"{self.options.data_plane_image}")
                return
            except ApiException as err:
                if err.status != 409:
                    raise api_error(f"create step Job {self.name}", self.namespace, err) from None
            existing = self._read_job()
            if existing is None:
                continue
            same = (existing.metadata.annotations or {}).get(SPEC_HASH_ANNOTATION) == \
                manifest["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
            if same and not existing.metadata.deletion_timestamp and finished_state(existing) is None:
                self.on_line(f"[cluster] step {self.step}: following Job {self.namespace}/{self.name}, still running "
                             "from an earlier try of this task")
                return
            self.on_line(f"[cluster] step {self.step}: Job {self.name} of an earlier try is there; deleting it to "
                         "run the step afresh")
            self.delete()
            self._wait_deleted()
        raise KubernetesLaunchError(f"step Job {self.namespace}/{self.name} kept appearing and disappearing; check who "
                                    "else manages it")

    def _read_job(self) -> Any | None:
        try:
            # jobs/status: what the launcher's Role grants (docs/kubernetes.md), no `get` on jobs needed
            return self.kube.batch_v1_client.read_namespaced_job_status(self.name, self.namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise api_error(f"read step Job {self.name}", self.namespace, err) from None

    def _wait_deleted(self) -> None:
        deadline = time.monotonic() + DELETE_WAIT_SECONDS
        while self._read_job() is not None or self._pods():
            if time.monotonic() > deadline:
                raise KubernetesLaunchError(f"step Job {self.namespace}/{self.name} is still being deleted after "
                                            f"{DELETE_WAIT_SECONDS} s; check its finalizers")
            time.sleep(1)

    # ---- follow ----------------------------------------------------------------------------------------------
    def _pods(self) -> list[Any]:
        try:
            return self.kube.core_v1_client.list_namespaced_pod(
                self.namespace, label_selector=f"job-name={self.name}").items
        except ApiException as err:
            raise api_error(f"list the pods of step Job {self.name}", self.namespace, err) from None

    def _wait_for_pod(self) -> Any:
        """The step's pod once its container runs or ran; fails at once on what waiting cannot cure."""
        started = time.monotonic()
        deadline = started + self.options.startup_timeout_seconds
        said = held = None
        while True:
            pods = self._pods()
            if not pods and held is None and time.monotonic() - started > NO_POD_SECONDS:
                held = self._held_by()
                if held:
                    self.on_line(f"[cluster] step {self.step}: Job {self.namespace}/{self.name} {held}")
            for pod in pods:
                if pod.metadata.deletion_timestamp:
                    continue
                status = _container_status(pod, self.container)
                state = status.state if status else None
                if state and (state.running or state.terminated):
                    return pod
                waiting = state.waiting if state else None
                # a registry's rate limit passes: waited out until the start timeout, as the training's pulls are
                if waiting and waiting.reason in STUCK_REASONS and not is_rate_limited(waiting.message or "") and (
                        waiting.reason != "CreateContainerConfigError" or config_error_is_permanent(waiting.message)):
                    self.delete()
                    raise StepError(
                        f"step {self.step} cannot start in namespace {self.namespace} ({waiting.reason}: "
                        f"{waiting.message or ''}); check [training.kubernetes] data_plane_image "
                        f"({self.options.data_plane_image}) and storage_secret ({self.options.storage_secret or 'none'})",
                        permanent=True)
                phase = waiting.reason if waiting else pod.status.phase
                if phase != said:
                    self.on_line(f"[cluster] step {self.step}: pod {pod.metadata.name} {phase}")
                    said = phase
            if time.monotonic() > deadline:
                self.delete()
                raise KubernetesLaunchError(
                    f"step {self.step} did not start within {self.options.startup_timeout_seconds} s in namespace "
                    f"{self.namespace}" + (f" ({held})" if held else "") + "; check the namespace's quota and the "
                    f"workspace claim {self.options.workspace_pvc}")
            time.sleep(_poll_pause(time.monotonic() - started))

    def _held_by(self) -> str:
        """Why the step's Job has no pod yet, when its spec says: Kueue (or another admission controller) holds it
        suspended until it admits it; '' otherwise (a quota, a slow controller: the start timeout decides)."""
        job = self._read_job()
        if job is None or not (job.spec and job.spec.suspend):
            return ""
        queue = ((job.metadata.labels or {}).get(QUEUE_LABEL))
        if queue:
            return f"waits suspended in Kueue queue {queue} until Kueue admits it"
        return ("waits suspended: Kueue holds the namespace's Jobs without a queue (manageJobsWithoutQueueName); "
                "name the steps' LocalQueue in the profile's data_plane_queue")

    def _stream_log(self, pod: Any) -> None:
        """Every line of the step's log, as it is written; a dropped stream is resumed after the lines seen."""

        core, seen = self.kube.core_v1_client, 0
        for _ in range(5):
            count = 0
            try:
                response = core.read_namespaced_pod_log(pod.metadata.name, self.namespace, container=self.container,
                                                        follow=True, _preload_content=False)
                for line in log_lines(response):
                    count += 1
                    if count > seen:
                        self.on_line(line)
                seen = max(seen, count)
            except (ApiException, OSError) as err:
                log.debug("the log stream of step %s broke: %s", self.name, err)
                seen = max(seen, count)
            if self._terminated(pod.metadata.name) is not None:
                return
            time.sleep(1)

    def _terminated(self, pod_name: str) -> Any | None:
        try:  # a list, not a get: the launcher's Role lists pods (docs/kubernetes.md)
            pods = self.kube.core_v1_client.list_namespaced_pod(
                self.namespace, field_selector=f"metadata.name={pod_name}").items
        except ApiException as err:
            raise api_error(f"read pod {pod_name}", self.namespace, err) from None
        if not pods:
            raise KubernetesLaunchError(f"the pod {pod_name} of step {self.step} was deleted while it ran "
                                        f"(namespace {self.namespace})")
        status = _container_status(pods[0], self.container)
        return status.state.terminated if status and status.state else None

    def _outcome(self, pod: Any) -> StepOutcome:
        started = time.monotonic()  # the log ends a moment before the kubelet reports the exit
        while (terminated := self._terminated(pod.metadata.name)) is None:
            if time.monotonic() - started > 60:
                raise KubernetesLaunchError(f"the log of step {self.step} ended but its pod {pod.metadata.name} "
                                            "did not terminate within 60 s")
            time.sleep(_poll_pause(time.monotonic() - started))
        try:
            said = json.loads(terminated.message or "")
        except ValueError:
            said = None
        if not isinstance(said, dict):
            reason = "OOMKilled: give the step more memory" if terminated.reason == "OOMKilled" else \
                f"{terminated.reason or 'ended'} without a result"
            return StepOutcome(error=f"step {self.step} in pod {pod.metadata.name} exited with code "
                                     f"{terminated.exit_code} ({reason}); see the lines above")
        if terminated.exit_code == 0 and not self.options.keep_finished_jobs:
            self.delete()  # done: its result is in hand (ttlSecondsAfterFinished would remove it later anyway)
        return StepOutcome(result=said.get("result"), skipped=said.get("skip"), failed=said.get("fail"),
                           error=said.get("error"))


def succeeded_in_cluster(kube: Any, options: KubernetesJobOptions, job_name: str, job_root: str, state: str,
                         on_line: Callable[[str], None]) -> bool:
    """Whether the last launch of the job succeeded, asked of a step on the cluster's workspace (this worker cannot
    read the job root there): what a retry needs when ttlSecondsAfterFinished removed the Job. A step that cannot say
    answers no: the job trains again, as it would without the question."""
    step = ClusterStep(kube, options, job_name, "outcome", on_line=on_line)
    try:
        outcome = step.run(workspace=options.data_plane_workspace,
                           command=[*WORKSPACE_COMMAND, "succeeded", "--state", state, job_root], payload={},
                           settings_env={})
    except (StepError, KubernetesLaunchError) as err:
        on_line(f"[cluster] could not tell whether the last launch of {job_name} succeeded ({err}); training again")
        return False
    if outcome.error:
        on_line(f"[cluster] could not tell whether the last launch of {job_name} succeeded ({outcome.error}); "
                "training again")
    return outcome.result is True


def log_lines(response: Any) -> Any:
    """The lines of a followed pod log (an unpreloaded response), as they come."""
    buffered = b""
    for chunk in response.stream(65536):
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")
    if buffered:
        yield buffered.decode("utf-8", "replace")


def _container_status(pod: Any, container: str = STEP_CONTAINER) -> Any | None:
    for status in (pod.status and pod.status.container_statuses) or []:
        if status.name == container:
            return status
    return None

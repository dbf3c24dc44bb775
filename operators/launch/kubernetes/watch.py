"""Following a training Job on Kubernetes until it succeeds or a failure is certain: the watch the trigger runs
in the triggerer (deferrable mode) and the Kubernetes launcher runs on the worker (blocking mode).

Why our own watch and not the provider's KubernetesJobTrigger: that one waits for the Job's Complete/Failed
condition and nothing else, so a pod stuck in ImagePullBackOff / InvalidImageName never fails the Job (the task
would wait forever); an OOMKilled pod is retried by the Job controller until backoffLimit and the event says only
"BackoffLimitExceeded"; it streams no pod logs while waiting, and its event carries ``job.to_dict()`` rather than
primitives. What we reuse from the provider: AsyncKubernetesHook (connections, ``get_job_status`` with its retry
policy) and ``detect_pod_terminate_early_issues`` (which image-pull errors are permanent).

:meth:`JobWatch.run` returns an event of primitives only:

  {"status": "success" | "failed", "name", "namespace", "failure_class", "message", "exit_code", "host",
   "job_finished": bool,           # False: we gave up early (image error, OOM): the Job must be stopped
   "job_missing": bool,            # the Job is gone (deleted, or removed by ttlSecondsAfterFinished)
   "image_digest": str | None,     # the training container's imageID (rank 0's, else the first pod's that has one)
   "pods": {pod name: index},      # every pod seen, for the final log catch-up
   "log_cursors": {pod name: [last timestamp ns, lines seen at it]}}

Pods are the Job's by its uid (label batch.kubernetes.io/controller-uid), never by name: the terminating pods of
an earlier try's Job of the same name must not decide this one. Warning events: operators/launch/kubernetes/events.py.

Logs: each running pod's log is followed (operators/launch/kubernetes/pod_logs.py); the consumer of the event
fetches each pod's log once more at the end and passes on only the lines after the cursor.
``keep_cursors`` (the trigger) keeps them on the Job: a restarted triggerer repeats no line (operators/launch/kubernetes/log_cursors.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes_asyncio.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from operators.launch.base import (
    EVICTED,
    IMAGE_ERROR,
    OOM,
    PLATFORM_ERROR,
    USER_ERROR,
    image_mismatch,
    is_rate_limited,
    same_image,
)
from operators.launch.kubernetes.elastic import ElasticHosts
from operators.launch.kubernetes.events import list_warnings, read_warnings
from operators.launch.kubernetes.job_failure import failure_event, job_failure
from operators.launch.kubernetes.log_cursors import CursorKeeper
from operators.launch.kubernetes.names import CONTROLLER_UID_LABEL
from operators.launch.kubernetes.pod_logs import PodLogFollowers
from operators.launch.kubernetes.pods import (
    DEFINITE_PULL_ERROR,
    FATAL_WAITING_REASONS,
    MISSING_CLAIM,
    PULL_WAITING_REASONS,
    config_error_is_permanent,
    disruption,
    not_started,
    pod_index,
    pull_error_is_permanent,
    short_text,
    train_status,
)
from operators.launch.kubernetes.workload import GROUP, QUEUE_LABEL, VERSION, QueueStatus, queue_status, workload_of
from operators.launch.log_stream import Emit


HEARTBEAT_SECONDS = 300
NO_PODS_HINT_SECONDS = 60


class JobWatch:
    """Follows one training Job until it succeeds or a failure is certain; see the module docstring."""

    def __init__(
        self,
        hook: Any,
        *,
        name: str,
        namespace: str,
        instance_count: int,
        poll_interval: float,
        image_pull_grace_seconds: float,
        emit: Emit,
        startup_timeout_seconds: float = 600,
        keep_cursors: bool = False,
        expected_image_digest: str | None = None,
    ):
        self.hook = hook
        self.keeper = CursorKeeper(name, namespace, self.say, enabled=keep_cursors)
        self.name = name
        self.namespace = namespace
        self.instance_count = instance_count
        self.poll_interval = poll_interval
        self.image_pull_grace_seconds = image_pull_grace_seconds
        self.startup_timeout_seconds = startup_timeout_seconds
        self.emit = emit
        self.logs = PodLogFollowers(namespace, poll_interval, emit, self.say, self.host, prefixed=instance_count > 1)
        self.pods: dict[str, int] = {}
        self.phases: dict[str, str] = {}
        self.disruptions: dict[str, str] = {}  # pod -> why
        self.throttled_since: dict[str, float] = {}
        self.starting_since: dict[str, float] = {}  # pod -> when first seen on a node, not started
        self.last_warning: dict[str, str] = {}  # pod uid -> its latest warning event
        self.said: set[str] = set()
        self.job_uid: str | None = None
        self.queue_said: str | None = None  # the last queue line (Kueue), said again only when it changes
        self.preempted: str | None = None  # Kueue's eviction of this Job, if any (see operators/launch/kubernetes/workload.py)
        self.queued_since: float | None = None
        self.elastic_hosts = ElasticHosts()  # an elastic Job's lost hosts and their replacements (elastic.py)
        self.started = time.monotonic()
        self.last_heartbeat = self.started
        # The image the pods ran (imageID) and the one a pinned run must run (LaunchRequest.expected_image_digest).
        self.image_digest: str | None = None
        self.image_index = 0  # the host whose imageID image_digest is
        self.image_ids: dict[str, str] = {}  # pod -> its imageID
        self.expected_image_digest = expected_image_digest

    def host(self, pod_name: str) -> str:
        return f"{self.name}-{self.pods.get(pod_name, 0)}"

    def say(self, message: str, once_key: str | None = None) -> None:
        if once_key is not None:
            if once_key in self.said:
                return
            self.said.add(once_key)
        self.emit(f"[kubernetes] {message}")

    # ---- state ----------------------------------------------------------------------------------------
    def observe(self, pods: list[Any]) -> None:
        """Record what the pods tell and report changes (each once: the task log stays readable)."""
        for pod in self.elastic_hosts.in_order(pods):
            name = pod.metadata.name
            self.pods.setdefault(name, pod_index(pod))
            host = self.host(name)
            self.elastic_hosts.observe(pod, self.pods[name], host, self.say)
            phase = (pod.status and pod.status.phase) or "Pending"
            if self.phases.get(name) != phase:
                self.say(f"{host} (pod {name}): {phase}")
                self.phases[name] = phase
            self.observe_image(pod, host)
            why = disruption(pod)
            if why and name not in self.disruptions:
                self.disruptions[name] = why
                self.say(
                    f"{host} (pod {name}) was evicted or preempted ({why}); Kubernetes replaces it and the "
                    "training resumes from its last checkpoint"
                )
            for condition in (pod.status and pod.status.conditions) or []:
                if condition.type == "PodScheduled" and condition.status == "False" and condition.message:
                    self.say(f"{host} waits for a node: {condition.message}", f"sched:{name}:{condition.message}")

    def observe_image(self, pod: Any, host: str) -> None:
        """The training container's imageID (set once the runtime has the image): the lowest host's seen (rank 0's)
        is the job's; a pod that runs another image is said once, as a warning (a tag moved while the pods started)."""
        status = train_status(pod)
        image_id = str(getattr(status, "image_id", None) or "").strip()
        if not image_id or self.image_ids.get(pod.metadata.name) == image_id:  # judged when first seen
            return
        index = self.pods.get(pod.metadata.name, 0)
        self.image_ids[pod.metadata.name] = image_id
        if self.image_digest is not None and not same_image(image_id, self.image_digest):
            self.say(f"warning: the job's pods run different images: {host} (pod {pod.metadata.name}) {image_id}, "
                     f"{self.name}-{self.image_index} {self.image_digest} (the tag named another image when they "
                     "started); the lineage records the lowest host's", f"image:{pod.metadata.name}")
        if self.image_digest is None or index < self.image_index:
            self.image_digest, self.image_index = image_id, index

    def pinned_image(self, pods: list[Any], finished: bool) -> dict[str, Any] | None:
        """A run pinned to an image digest whose pods run another image: the failure (IMAGE_ERROR) that stops it."""
        expected = self.expected_image_digest
        if not expected:
            return None
        for pod in pods:
            actual = self.image_ids.get(pod.metadata.name)
            if actual is not None and not same_image(actual, expected):
                image = getattr(train_status(pod), "image", None) or "?"
                return failure_event(IMAGE_ERROR, image_mismatch(image, actual, expected),
                                     host=self.host(pod.metadata.name), finished=finished)
        return None

    def fail_fast(self, pods: list[Any]) -> dict[str, Any] | None:
        """Failures not worth waiting for the Job controller on: bad image, OOM, broken config."""
        now = time.monotonic()
        for pod in pods:
            name = pod.metadata.name
            host = self.host(name)
            stalled = self.stalled_start(pod, host, now)
            if stalled is not None:
                return stalled
            for condition in (pod.status and pod.status.conditions) or []:
                missing = MISSING_CLAIM.search(condition.message or "")
                if condition.type == "PodScheduled" and condition.status == "False" and missing:
                    return failure_event(
                        USER_ERROR,
                        f"{host} cannot be scheduled: {condition.message}; create the ReadWriteMany claim "
                        f"{missing.group(1)!r} of the workspace in namespace {self.namespace} (or set "
                        "[training.kubernetes] workspace_pvc)",
                        host=host,
                        finished=False,
                    )
            status = train_status(pod)
            if status is None or status.state is None:
                continue
            waiting, terminated = status.state.waiting, status.state.terminated
            if terminated is not None and terminated.reason == "OOMKilled" and not self.elastic_hosts.enabled:
                return failure_event(
                    OOM,
                    f"{host} ran out of memory (OOMKilled, exit code {terminated.exit_code}); "
                    "raise resources.memory or lower the batch size",
                    exit_code=terminated.exit_code,
                    host=host,
                    finished=False,
                )
            if waiting is None:
                continue
            reason, detail = waiting.reason or "", waiting.message or ""
            if reason in FATAL_WAITING_REASONS:
                return self.image_failure(host, reason, detail)
            if reason in PULL_WAITING_REASONS:
                # Before kubelet 1.32 the back-off message does not repeat the pull error: a pod seen
                # rate-limited stays so until the registry says something definite.
                throttled = is_rate_limited(detail) or (
                    name in self.throttled_since and reason == "ImagePullBackOff" and not DEFINITE_PULL_ERROR.search(detail)
                )
                if not throttled and pull_error_is_permanent(pod):
                    return self.image_failure(host, reason, detail)
                first = self.throttled_since.setdefault(name, now)
                self.say(
                    f"{host}: the registry refuses to serve the image for now ({reason}: {detail}); "
                    f"retrying for up to {int(self.image_pull_grace_seconds)} s",
                    f"throttled:{name}",
                )
                if now - first > self.image_pull_grace_seconds:
                    return self.image_failure(
                        host, reason, f"still rate-limited after {int(now - first)} s: {detail}"
                    )
            elif reason == "CreateContainerConfigError" and config_error_is_permanent(detail):
                return failure_event(
                    USER_ERROR,
                    f"{host} cannot start: {detail or reason}; create the Secret/ConfigMap it refers to "
                    "(options.secret_env / env_from_secrets) in namespace " + self.namespace,
                    host=host,
                    finished=False,
                )
        return None

    def stalled_start(self, pod: Any, host: str, now: float) -> dict[str, Any] | None:
        """A pod on a node that has not started its container within startup_timeout_seconds: the node cannot
        run it (a sandbox, network or volume failure). Kubernetes retries that forever; the task would wait until
        max_run_seconds. Waiting for a node (capacity) is not counted."""
        name, reason = pod.metadata.name, not_started(pod)
        if reason is None:
            self.starting_since.pop(name, None)
            return None
        waited = now - self.starting_since.setdefault(name, now)
        if waited <= self.startup_timeout_seconds:
            return None
        warning = self.last_warning.get(pod.metadata.uid)
        return failure_event(
            PLATFORM_ERROR,
            f"{host} (pod {name}) is on node {pod.spec.node_name or '?'} but has not started its container after "
            f"{int(waited)} s ({reason}{'; last warning: ' + warning if warning else ''}); the node cannot start it: "
            f"see `kubectl -n {self.namespace} describe pod {name}`; for an image that takes longer to pull, raise "
            "the kubernetes option startup_timeout_seconds",
            host=host,
            finished=False,
        )

    def image_failure(self, host: str, reason: str, detail: str) -> dict[str, Any]:
        return failure_event(
            IMAGE_ERROR,
            f"{host} cannot pull its image ({reason}): {detail}; check image_uri, the registry and "
            "image_pull_secrets",
            host=host,
            finished=False,
        )

    def warnings(self, events: list[Any], pods: list[Any]) -> dict[str, Any] | None:
        refused, notes = read_warnings(events, self.job_uid, pods, self.instance_count, self.host, self.name)
        for event in events:  # sorted by time: the latest of each pod stays
            if event.involved_object is not None and event.involved_object.uid:
                self.last_warning[event.involved_object.uid] = f"{event.reason}: {short_text(event.message, 300)}"
        for key, line in notes:
            self.say(line, key)
        return failure_event(USER_ERROR, refused, finished=False) if refused else None

    def queue_verdict(self, job: Any, status: QueueStatus | None) -> dict[str, Any] | bool:
        """A Job in a Kueue queue: report its Workload's state when it changes. Returns a failure event (it can
        never be admitted), True while the Job waits suspended (no pods to judge; start-up clocks not running),
        False when the pods decide."""
        if status is None:
            return False
        if status.note:
            self.say(status.note, f"note:{status.note}")
        if status.message != self.queue_said and status.state != "finished":
            self.queue_said = status.message
            self.say(status.message)
        if status.note:
            self.preempted = status.note
        if status.state == "refused":
            return failure_event(USER_ERROR, status.message, finished=False)
        if job.spec is not None and job.spec.suspend:
            # Queue time is not start-up time: startup_timeout_seconds and the no-pods hint count from admission.
            now = time.monotonic()
            self.queued_since = self.queued_since or now
            if now - self.last_heartbeat >= HEARTBEAT_SECONDS:
                self.last_heartbeat = now
                self.say(f"still {status.message}; {int(now - self.queued_since)} s in the queue")
            self.started = now
            self.starting_since.clear()
            self.elastic_hosts.suspended()
            return True
        return False

    async def read_queue(self, objects: Any, job: Any) -> QueueStatus | None:
        queue = ((job.metadata and job.metadata.labels) or {}).get(QUEUE_LABEL)
        if not queue:
            return None
        try:
            listed = await objects.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "workloads")
        except ApiException as err:
            if err.status == 404:  # no Workload API: the label would keep the Job suspended for ever
                return QueueStatus("refused", f"the Job is in Kueue queue {queue} but the cluster serves no Kueue "
                                              "Workloads; install Kueue or unset [training.kubernetes] queue")
            if err.status != 403:
                raise
            self.say(f"may not list Kueue Workloads in {self.namespace} (the Role needs workloads get/list/watch): "
                     "the queue position is not shown", "workloads-403")
            return QueueStatus("queued", f"queued in {queue}")
        workloads = listed.get("items") or []
        return queue_status(workload_of(job.metadata.uid, workloads), workloads, queue)

    def verdict(self, job: Any, pods: list[Any], events: list[Any] = ()) -> dict[str, Any] | None:
        conditions = {c.type: c for c in (job.status and job.status.conditions) or [] if c.status == "True"}
        self.elastic_hosts.read_job(job, conditions)
        self.observe(pods)
        done = "Complete" in conditions or "SuccessCriteriaMet" in conditions
        pinned = self.pinned_image(pods, finished=done or "Failed" in conditions)
        if pinned is not None:  # whatever it did: it ran another image than the one it must run
            return pinned
        if done:
            return failure_event(None, "completed", exit_code=0, status="success")
        failed = conditions.get("Failed") or conditions.get("FailureTarget")
        if failed is not None:
            event = job_failure(failed, pods, self.host, self.disruptions, self.instance_count)
            if self.preempted and event["failure_class"] == PLATFORM_ERROR:
                # The pods Kueue's preemption stopped: not the job's fault; a retry queues it again and resumes.
                event.update(failure_class=EVICTED, message=f"{self.preempted}; then {event['message']}")
            return event
        early = self.warnings(events, pods) or self.fail_fast(pods)
        if early is not None:
            return early
        now = time.monotonic()
        if not pods and now - self.started > NO_PODS_HINT_SECONDS:
            self.say(
                f"Kubernetes has created no pod for Job {self.name} after {NO_PODS_HINT_SECONDS} s; see "
                f"`kubectl -n {self.namespace} describe job {self.name}` (quota, Pod Security admission, ...)",
                "no-pods",
            )
        if now - self.last_heartbeat >= HEARTBEAT_SECONDS:
            self.last_heartbeat = now
            running = sum(1 for p in pods if p.status and p.status.phase == "Running")
            self.say(f"Job {self.name}: {running}/{self.instance_count} hosts running, {int(now - self.started)} s")
        return None

    # ---- the loop -------------------------------------------------------------------------------------
    async def list_pods(self, core: Any) -> list[Any]:
        result = await core.list_namespaced_pod(
            namespace=self.namespace, label_selector=f"{CONTROLLER_UID_LABEL}={self.job_uid}")
        return list(result.items or [])

    async def run(self) -> dict[str, Any]:
        try:
            async with self.hook.get_conn() as api:
                core, batch = CoreV1Api(api), BatchV1Api(api)
                try:
                    result = await self._watch(core, batch, CustomObjectsApi(api))
                except asyncio.CancelledError:  # the triggerer stops: keep the log position for the next one
                    await asyncio.wait_for(self.keeper.save(batch, self.logs.cursors), 10)
                    raise
                # Give the follow streams a moment to end on their own (containers have exited).
                await self.logs.stop(wait=2.0)
        finally:
            self.logs.cancel()
        result.update(name=self.name, namespace=self.namespace, pods=dict(self.pods), log_cursors={
            pod: list(cursor) for pod, cursor in self.logs.cursors.items()},
            restarts=self.elastic_hosts.restarts(self.name), image_digest=self.image_digest)
        return result

    async def _watch(self, core: Any, batch: Any, objects: Any = None) -> dict[str, Any]:
        """Poll the Job, its pods and the namespace's warnings until a verdict."""
        errors = 0
        while True:
            try:
                job = await self.hook.get_job_status(name=self.name, namespace=self.namespace)
                self.job_uid = job.metadata.uid
                self.keeper.load(job, self.logs.cursors)
                pods = await self.list_pods(core)
                events = await list_warnings(core, self.namespace)
                queued = await self.read_queue(objects, job) if objects is not None else None
                errors = 0
            except ApiException as err:
                if err.status == 404:
                    return {**failure_event(PLATFORM_ERROR, f"Job {self.namespace}/{self.name} no longer exists "
                                           "(deleted outside Airflow?); retry to start it again"), "job_missing": True}
                errors += 1
                if errors >= 10:
                    raise
                self.say(f"Kubernetes API error {err.status} while watching; retrying", f"api:{err.status}")
                await asyncio.sleep(self.poll_interval)
                continue
            for pod in pods:  # before a pod's first line: its host prefix needs the index
                self.pods.setdefault(pod.metadata.name, pod_index(pod))
            self.logs.update(core, pods)
            waiting = self.queue_verdict(job, queued)
            if isinstance(waiting, dict):
                return waiting
            result = None if waiting else self.verdict(job, pods, events)
            if result is not None:
                return result
            await self.keeper.save(batch, self.logs.cursors)
            await asyncio.sleep(self.poll_interval)

"""The trigger that waits in the triggerer for a training Job on Kubernetes (deferrable mode).

It holds only primitives and its waiting loop: the watch itself (pods, logs, failure classes) is
operators/launch/kubernetes/watch.py, the deletes are operators/launch/kubernetes/api.py. Lines go to the trigger's
log (which Airflow shows in the task log) and are matched against metric_definitions as they pass; the event is
the watch's (primitives only, see operators/launch/kubernetes/watch.py) plus the matched metrics; with `series_xcom`
the series so far are also the task's XCom while it waits (operators/tracking/live_series.py).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Mapping

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.sdk.log import mask_secret
from airflow.triggers.base import BaseTrigger, TriggerEvent

from operators.jobspec.secret_refs import redactor
from operators.launch.kubernetes.api import delete_job_async
from operators.launch.kubernetes.secrets import read_values_async
from operators.launch.kubernetes.watch import JobWatch
from operators.tracking.live_series import record_series
from operators.tracking.metrics import MetricCollector


class KubernetesTrainingJobTrigger(BaseTrigger):
    """Waits in the triggerer for a training Job (see the module docstring); one event, primitives only."""

    def __init__(
        self,
        name: str,
        namespace: str,
        instance_count: int,
        kubernetes_conn_id: str | None = None,
        poll_interval: float = 5.0,
        image_pull_grace_seconds: float = 600,
        startup_timeout_seconds: float = 600,
        propagation_policy: str = "Foreground",
        metric_definitions: list[dict[str, str]] | None = None,
        kube_config_path: str | None = None,
        cluster_context: str | None = None,
        has_secret: bool = False,
        metrics_echoed: bool = False,
        series_xcom: Mapping[str, Any] | None = None,
        expected_image_digest: str | None = None,
    ):
        super().__init__()
        # Where the connection names a kubeconfig file (a path: no secret), the trigger carries it: the
        # connection cannot always be read in the triggerer (`airflow dags test` runs the trigger in-process,
        # where the async connection lookup finds nothing and the provider falls back to ~/.kube/config).
        self.kube_config_path = kube_config_path
        self.cluster_context = cluster_context
        self.metric_definitions = list(metric_definitions or [])
        self.name, self.namespace, self.instance_count = name, namespace, instance_count
        self.kubernetes_conn_id = kubernetes_conn_id
        self.poll_interval, self.image_pull_grace_seconds = poll_interval, image_pull_grace_seconds
        self.startup_timeout_seconds, self.propagation_policy = startup_timeout_seconds, propagation_policy
        # The Job has a Secret of secrets by reference (operators/launch/kubernetes/secrets.py): its values are read
        # here, in the triggerer, and masked in the lines streamed from the pods; only this flag is serialized.
        self.has_secret = has_secret
        # The log carries the metrics stream's points too (the cluster's data plane: see MetricCollector).
        self.metrics_echoed = metrics_echoed
        # {dag_id, task_id, run_id, map_index}: the task whose XCom records the series as they grow (None: none)
        self.series_xcom = dict(series_xcom) if series_xcom else None
        self.expected_image_digest = expected_image_digest  # a pinned run: pods that run another image stop the Job

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name,
                "namespace": self.namespace,
                "instance_count": self.instance_count,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "poll_interval": self.poll_interval,
                "image_pull_grace_seconds": self.image_pull_grace_seconds,
                "startup_timeout_seconds": self.startup_timeout_seconds,
                "propagation_policy": self.propagation_policy,
                "metric_definitions": self.metric_definitions,
                "kube_config_path": self.kube_config_path,
                "cluster_context": self.cluster_context,
                "has_secret": self.has_secret,
                "metrics_echoed": self.metrics_echoed,
                "series_xcom": self.series_xcom,
                "expected_image_digest": self.expected_image_digest,
            },
        )

    def _hook(self):
        if self.kube_config_path:
            extras = {"kube_config_path": self.kube_config_path}
            if self.cluster_context:
                extras["cluster_context"] = self.cluster_context
            return AsyncKubernetesHook(conn_id=self.kubernetes_conn_id or None, connection_extras=extras)
        return AsyncKubernetesHook(conn_id=self.kubernetes_conn_id or None)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The log streams here, not in the worker: metrics are matched as lines pass and travel in the event.
        metrics = MetricCollector(self.metric_definitions, echoed=self.metrics_echoed)
        redact = await self._redactor()

        def emit(line: str) -> None:
            line = redact(line)
            if not metrics.feed(line):  # an echoed point is not output to show
                self.log.info("%s", line)

        watch = JobWatch(
            self._hook(),
            name=self.name,
            namespace=self.namespace,
            instance_count=self.instance_count,
            poll_interval=self.poll_interval,
            image_pull_grace_seconds=self.image_pull_grace_seconds,
            startup_timeout_seconds=self.startup_timeout_seconds,
            emit=emit,
            keep_cursors=True,  # a restarted triggerer continues each pod's log where this one left it
            expected_image_digest=self.expected_image_digest,
        )
        stop_recording = asyncio.Event()
        recording = self.series_xcom and asyncio.create_task(record_series(metrics, self.series_xcom, stop_recording))
        try:
            event = dict(await watch.run())
        finally:
            stop_recording.set()
            if recording:  # a record on its way is finished first, never left racing the event
                await recording
        for key in ("message", "detail"):  # a termination message is the pod's last log lines; the event is stored
            if isinstance(event.get(key), str):
                event[key] = redact(event[key])
        event["metrics"] = metrics.series
        yield TriggerEvent(event)

    async def _redactor(self):
        if not self.has_secret:
            return redactor(())
        try:
            values = await read_values_async(self._hook(), self.name, self.namespace)
        except Exception as err:  # noqa: BLE001 - waiting matters more; say that lines may show the values
            self.log.warning("Could not read the Job's Secret to mask its values in the pod logs: %s", err)
            values = {}
        for key, value in values.items():
            mask_secret(value, key)
        return redactor(values.values())

    async def on_kill(self) -> None:
        """The user marked the deferred task failed/success or cleared it: leave nothing running."""
        self.log.info("Deleting Job %s/%s, its pods and its Service", self.namespace, self.name)
        await delete_job_async(self._hook(), self.name, self.namespace, self.propagation_policy)

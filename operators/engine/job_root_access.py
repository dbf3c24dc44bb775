"""Where a training's job root is, seen from the process that launches and watches it (the launch stage): what that
process may read and write there follows from it, so the stage asks one of these objects instead of branching.

- JobRootHere: on this process's [training] workspace (the local and docker backends, kubernetes with the worker's
  data plane). The launch claims the job for its run, writes metrics.json while the training goes, reads the metrics
  stream at the end, syncs checkpoint_path, holds the job root to its disk cap and records a failure's reason in
  output/failure.
- JobRootInCluster: in the cluster's volume (the backend declared a cluster workspace for the job: kubernetes with
  data_plane = cluster). Only the backend's pods see it: `train` echoes its metrics stream into the log
  (operators/engine/launch.py launch_request), the series goes to the task's XCom (`push`), the backend's own pod syncs
  checkpoints, the data-plane steps claimed the job, and nothing here is read or written.

job_root_access() picks one from the backend's declaration for the job (operators/launch/declaration.py
cluster_workspace)."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Mapping

from training_runtime.contract import METRICS_STREAM

from operators.fs.job_root import JobRoot
from operators.launch.disk_cap import CHECK_SECONDS, DiskCapWatch, measure
from operators.launch.outcome import record_failure
from operators.staging.checkpoints import CheckpointSync
from operators.tracking.metrics import LIVE_SERIES_SECONDS, METRIC_SERIES_KEY, MetricCollector

# While training runs, the metrics matched so far are written to the job root's metrics.json at most this often, so
# the training-jobs view draws the curves as they grow.
LIVE_METRICS_SECONDS = 2.0
METRICS_JSON = "metrics.json"  # in the job root's output/: what the upload publishes and the view draws

Push = Callable[[str, Any], None]  # an XCom of the launch task: key, value


class JobRootHere:
    """The job root is on this process's workspace: the launch reads and writes it."""

    here = True
    echoes_metrics = False  # the metrics stream is read from the job root at the end
    live_seconds = LIVE_METRICS_SECONDS

    def __init__(self, layout, log: logging.Logger | logging.LoggerAdapter):
        self.layout, self.log = layout, log

    @property
    def readable_root(self) -> str | None:
        """The job root this process may read the training's files from (its metrics stream)."""
        return self.layout.root

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.layout.output_dir, METRICS_JSON)

    def claim(self, claim_job: Callable[[], None]) -> None:
        claim_job()

    def metrics(self, definitions: list[dict[str, Any]]) -> MetricCollector:
        return MetricCollector(definitions, echoed=self.echoes_metrics)

    def record_live(self, series: dict[str, Any]) -> None:
        try:
            write_metrics(self.layout.root, self.metrics_path, series)
        except OSError as err:  # the live view is a convenience: never fail the training for it
            self.log.debug("Could not write live metrics to %s: %s", self.metrics_path, err)

    def record_final(self, job_root: str, metrics: MetricCollector) -> None:
        """The points the script wrote to its metrics stream join the collector; metrics.json holds them all."""
        metrics.read_file(os.path.join(job_root, METRICS_STREAM), job_root=job_root)
        write_metrics(self.layout.root, self.metrics_path, metrics.to_json())

    def record_failure(self, reason: str, *, replace: bool = False) -> None:
        record_failure(self.layout.root, reason, replace=replace)

    def checkpoint_sync(self, storage, spec, settings, *, before_training: bool = True) -> CheckpointSync | None:
        if not spec.checkpoint_path:
            return None
        sync = CheckpointSync(storage, self.layout.checkpoint_dir, spec.checkpoint_path,
                              settings.checkpoint_sync_seconds, job_root=self.layout.root)
        if before_training:  # what is there now was restored from checkpoint_path: not uploaded back
            sync.mark_existing()
        return sync

    def measure(self, job_root: str, disk_limit: int | None) -> str | None:
        """The job root against its cap, now: the line saying it is over, else None."""
        if not disk_limit:
            return None
        try:
            return measure(job_root, disk_limit)
        except OSError as err:  # the worker's own trouble (descriptors, I/O): the training's result stands
            self.log.warning("Could not measure job root %s against its disk cap: %s", job_root, err)
            return None

    def watch_disk(self, job_root: str, disk_limit: int | None, over: Callable[[str], None]) -> DiskCapWatch | None:
        if not disk_limit:
            return None
        return DiskCapWatch(job_root, disk_limit, over).start()

    def disk_cap_holds(self, *, watched: bool) -> list[str]:
        """How the cap is held here, beside the kernel's per-file cap (the backend's capability)."""
        if watched:
            return [f"the worker measures the whole job root every {CHECK_SECONDS:g} s or more and stops the job over "
                    "it (no file system of the job's own holds it to it as it writes)"]
        return ["the job root is measured when the job ends (not while it waits in the triggerer)"]

    def trigger_task(self, task_ids: Mapping[str, Any]) -> dict[str, Any]:
        """What the deferred wait's trigger is given of the task: nothing, metrics.json is written here."""
        return {}


class JobRootInCluster:
    """The job root is in the cluster's volume: only the backend's pods see it."""

    here = False
    echoes_metrics = True  # `train` echoes the metrics stream into the log (operators/engine/launch.py)
    live_seconds = LIVE_SERIES_SECONDS
    readable_root = None

    def __init__(self, push: Push):
        self.push = push

    def claim(self, claim_job: Callable[[], None]) -> None:
        """The data-plane steps in the cluster claimed it (operators/stages/in_cluster.py)."""

    def metrics(self, definitions: list[dict[str, Any]]) -> MetricCollector:
        return MetricCollector(definitions, echoed=self.echoes_metrics)

    def record_live(self, series: dict[str, Any]) -> None:
        self.push(METRIC_SERIES_KEY, series)

    def record_final(self, job_root: str, metrics: MetricCollector) -> None:
        self.push(METRIC_SERIES_KEY, metrics.to_json())  # the upload's step writes metrics.json from it

    def record_failure(self, reason: str, *, replace: bool = False) -> None:
        """The task's failure says why; the job root's output/failure is the runtime's own."""

    def checkpoint_sync(self, storage, spec, settings, *, before_training: bool = True) -> None:
        return None  # the backend's own pod syncs checkpoint_path (launch_request's `checkpoints`)

    def measure(self, job_root: str, disk_limit: int | None) -> None:
        return None

    def watch_disk(self, job_root: str, disk_limit: int | None, over: Callable[[str], None]) -> None:
        return None

    def disk_cap_holds(self, *, watched: bool) -> list[str]:
        return []  # the cluster's volume's own quota is the limit

    def trigger_task(self, task_ids: Mapping[str, Any]) -> dict[str, Any]:
        """The trigger records the series so far as this task's XCom."""
        return {"series_xcom": dict(task_ids)}


JobRootAccess = JobRootHere | JobRootInCluster


def job_root_access(layout, cluster_workspace: str | None, *, log: logging.Logger | logging.LoggerAdapter,
                    push: Push) -> JobRootAccess:
    """The job root as the launching process sees it: `cluster_workspace` what the backend declared for the job
    (None: this process's workspace)."""
    if cluster_workspace is None:
        return JobRootHere(layout, log)
    return JobRootInCluster(push)


def write_metrics(job_root: str, path: str, data: dict) -> None:
    """metrics.json into the job root, through operators/fs (a link the script left at that name, or at a temp
    name beside it, is replaced, never written through)."""
    root = JobRoot(job_root)
    root.write_json(root.relative(path), data)

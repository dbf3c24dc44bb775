from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any, Mapping

from airflow.sdk import get_current_context
from operators.airflow_compat import AirflowException, AirflowFailException, AirflowSkipException
from training_runtime.contract import METRICS_STREAM

from operators.jobspec.errors import SpecError
from operators.engine.job_root_access import job_root_access
from operators.engine.launch import launch_request, launch_summary
from operators.jobspec.secret_refs import redactor, resolve_references
from operators.launch.base import DISK_LIMIT, LaunchRequest, LaunchResult
from operators.launch.registry import declaration_for, launcher_for, trigger_for
from operators.stages.base import JobStageOperator
from operators.stages.links import stage_links
from operators.storage.disk_space import human
from operators.tracking.metrics import MetricCollector
from operators.tracking.mlflow import configured_uri, job_run
from operators.tuning.early_stopping import TrialMonitor

QUEUE_KEY = "queue"  # {queue, priority} of a Job waiting in Kueue; read by plugins/training_console/jobs.py


# A failed launch's summary (it returns no XCom): what the training-jobs view and the upload's lineage read.
OUTCOME_KEY = "outcome"

class LaunchTrainingOperator(JobStageOperator):
    """Run the training on the spec's backend and wait for it; the launcher hook is the only backend-specific part.

    User output streams into this task's log as it is produced and is matched against metric_definitions. Checkpoints
    are synced to checkpoint_path while training runs (blocking backends) and at the end. On failure the runtime's
    reason becomes this task's error; user errors and invalid jobs are not retried, platform errors and evictions are.
    With a deferrable backend (kubernetes) and deferrable=True, the wait happens in the triggerer, not a worker slot.

    `early_stopping` (optional, a primitive dict; hyperparameter search trials, see operators/tuning/early_stopping.py): every
    objective point is checked as it streams; when the rule says stop, the training is stopped, metrics.json and the
    reason (as `failure`) are kept, and the task ends "skipped" (stopped early) instead of failed. Blocking path only.
    """

    template_fields = ("job", "channels", "early_stopping")
    operator_extra_links = stage_links()
    ui_color = "#ffe0b2"

    def __init__(self, *, channels: dict | Any = None, deferrable: bool | None = None,
                 early_stopping: Mapping[str, Any] | Any = None, **kwargs):
        super().__init__(**kwargs)
        self.channels = channels
        self.deferrable = deferrable
        self.early_stopping = early_stopping
        self._launcher = None
        self._files = None
        self._stop_reason: str | None = None
        self._over_disk_cap: str | None = None

    # -- building the request --------------------------------------------------------------------------
    @property
    def declaration(self):
        """What the job's backend can do (operators/launch/declaration.py)."""
        return declaration_for(self.spec.backend)

    @property
    def launcher(self):
        if self._launcher is None:
            self._launcher = launcher_for(self.spec.backend)
        return self._launcher

    @property
    def files(self):
        """The job root as this task sees it (operators/engine/job_root_access.py): on this worker, or in the cluster's
        volume where the backend declared one for the job (then only its pods see it)."""
        if self._files is None:
            self._files = job_root_access(self.layout, self.cluster_workspace, log=self.log,
                                          push=lambda key, value: self._push(key, value))
        return self._files

    def launch_request(self, with_secrets: bool = False):
        """The request the backend runs (operators/engine/launch.py, shared with the SDK's local mode)."""
        return launch_request(self.spec, self.layout, self.settings, self.launcher, channels=self.channels,
                              volume_here=self.files.here,
                              secret_env=self._secret_values() if with_secrets else None)

    def _secret_values(self) -> dict[str, str]:
        try:
            values = resolve_references(self.spec.secret_references())
        except SpecError as err:  # removed since the first task checked it: fix it, retrying will not help
            raise AirflowFailException(f"invalid job spec: {err}") from None
        self._secrets = list(values.values())
        return values

    def _metrics(self):
        return self.files.metrics([m.model_dump() for m in self.spec.metric_definitions])

    def _checkpoint_sync(self, *, before_training: bool = True):
        return self.files.checkpoint_sync(self.storage, self.spec, self.settings, before_training=before_training)

    # -- execution -------------------------------------------------------------------------------------
    def execute(self, context) -> dict:
        self._stop_reason = self._over_disk_cap = None
        self.files.claim(lambda: self.claim_job(context))
        request = replace(self.launch_request(with_secrets=True), attempt=getattr(context["ti"], "try_number", 1) or 1)
        context["ti"].xcom_push(key="job_root", value=request.job_root)
        use_defer = self.launcher.capabilities.deferrable and (
            self.deferrable if self.deferrable is not None else self.launcher.deferrable_default)
        if use_defer:
            self._say_disk_cap(request, watched=False)
            self.launcher.start(request)
            # The queue is recorded now, the view reads its place from the task log.
            queue = self.launcher.queue_of(request) if self.declaration.queues else None
            ti = context["ti"]
            ti.xcom_push(key=QUEUE_KEY, value=queue)
            task = self.files.trigger_task({"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
                                            "map_index": ti.map_index})
            # The launcher enforces max_run_seconds (activeDeadlineSeconds); this is the safety net behind it.
            self.defer(trigger=trigger_for(self.launcher, request, **task), method_name="execute_complete",
                       kwargs={"request": request.to_dict()},
                       timeout=timedelta(seconds=self.spec.max_run_seconds + 900))
        metrics = self._metrics()
        tracking = self._tracking(context)
        sync = self._checkpoint_sync()
        monitor = self._trial_monitor()
        stop_lock = threading.Lock()  # log lines and the metrics-file poller may both decide to stop

        log_line = self._log_and_match(metrics)

        def on_line(line: str) -> None:
            log_line(line)
            if monitor is not None:
                self._stop_early(monitor.observe_collector(metrics), request, stop_lock)

        if self.declaration.queues:  # a blocking launch that may wait its turn (the worker's GPUs)
            context["ti"].xcom_push(key=QUEUE_KEY, value=self.launcher.queue_of(request))
        if sync:
            sync.start()
        job_root = self.files.readable_root
        watching = self._watch_metrics_file(monitor, request, stop_lock) if monitor is not None and job_root \
            else None
        following = tracking.follow(lambda: _stream_view(metrics, job_root)) if tracking else None
        disk_watch = self._watch_disk(request)
        try:
            result = self.launcher.run(request, on_line)
        finally:
            for done in (watching, following):
                if done:
                    done.set()
            if disk_watch:
                disk_watch.stop()
            if sync:
                sync.stop()
        return self._finish(request, result, metrics, sync, tracking)

    def execute_complete(self, context, event: dict[str, Any], request: dict[str, Any] | None = None) -> dict:
        req = LaunchRequest.from_dict(request) if request else self.launch_request()
        if self.spec.secret_references():  # a new process after the deferral: mask the values in what follows
            try:
                self._secret_values()
            except Exception as err:  # noqa: BLE001 - the training is over; its result matters more
                self.log.warning("Could not read the secrets by reference again to mask them: %s", err)
        metrics = self._metrics()
        for name, points in (event.get("metrics") or {}).items():  # matched in the triggerer as the log streamed
            metrics.series[name] = list(points)

        result = self.launcher.result_from_event(req, event, self._log_and_match(metrics))
        # After a deferral the training is over: every checkpoint it wrote is there already, so nothing may be
        # marked as existing (that would upload none of them); files restored before it go up again, unchanged.
        return self._finish(req, result, metrics, self._checkpoint_sync(before_training=False),
                            self._tracking(context))

    def _log_and_match(self, metrics):
        """User output goes into the task log line by line and is matched against metric_definitions."""
        files = self.files
        last_write = [0.0]

        # Airflow's masker redacts registered secrets in real task runs; masking here too keeps the user's output
        # clean wherever the task logs to (dag.test() logs in-process without the redactor).
        redact = redactor(getattr(self, "_secrets", ()))

        def on_line(line: str) -> None:
            line = redact(line)
            if not metrics.feed(line):  # an echoed point is the metrics stream's, not output to show
                self.log.info("%s", line)
            if metrics.series and time.monotonic() - last_write[0] >= files.live_seconds:
                last_write[0] = time.monotonic()
                files.record_live(metrics.to_json())  # the job root's metrics.json, or the task's XCom

        return on_line

    def _tracking(self, context):
        """The job's MLflow run when [training] mlflow_tracking_uri is set (operators/tracking/mlflow.py), started
        (or found again, after a retry or a deferral); None when tracking is off."""
        uri = configured_uri()
        if not uri:
            return None
        tracking = job_run(uri, self.spec, dag_id=self.dag_id, run_id=context["run_id"],
                           map_index=getattr(context.get("ti"), "map_index", -1), logger=self.log)
        tracking.start()
        return tracking

    def _finish(self, request, result, metrics, sync, tracking=None) -> dict:
        # past the cap since the last look, or at the end
        over = self._over_disk_cap or self.files.measure(request.job_root, request.disk_limit)
        if over is not None:  # whatever the job said of itself: its job root is too big to be packed and kept
            self.log.error("Training %s: %s", self.spec.job_name, over)
            result = LaunchResult(False, result.exit_code, over, DISK_LIMIT, restarts=result.restarts,
                                  image_digest=result.image_digest)
            self._stop_reason = None  # not "stopped early": it failed
            self.files.record_failure(over, replace=True)  # why it was stopped, not the SIGTERM it got
        self.files.record_final(request.job_root, metrics)
        if tracking is not None:
            tracking.finish(metrics.series, "FINISHED" if result.succeeded else
                            "KILLED" if self._stop_reason is not None else "FAILED")
        if sync:
            sync.sync_final()
        # restarts: an elastic job's hosts that were started again (the training-jobs view shows them)
        summary = launch_summary(result, metrics.final()).to_dict()
        if self._stop_reason is not None and not result.succeeded:
            self._end_stopped_early()
        if result.succeeded:
            self.log.info("Training %s succeeded; final metrics: %s", self.spec.job_name, metrics.final() or "none")
            return summary
        # The runtime's own reason stays; else (timeout, eviction, ...) the launcher's (a pod's termination message
        # is its last log lines: they may show a secret).
        if result.failure_reason:
            result = replace(result, failure_reason=redactor(getattr(self, "_secrets", ()))(result.failure_reason))
        self.files.record_failure(str(result.failure_reason))
        self._record_outcome(summary)
        message = f"training job {self.spec.job_name} failed ({result.failure_class}): {result.failure_reason}"
        if result.retryable:
            raise AirflowException(message)
        raise AirflowFailException(message)

    def _record_outcome(self, summary: dict) -> None:
        """A failed task returns no XCom: the summary (failure class, metrics so far) goes under key "outcome",
        where the training-jobs view reads it."""
        self._push(OUTCOME_KEY, summary)

    def _push(self, key: str, value: Any) -> None:
        """An XCom for the training-jobs view, from wherever the task is (after a deferral, too)."""
        try:
            get_current_context()["ti"].xcom_push(key=key, value=value)
        except Exception as err:  # noqa: BLE001 - the UI's detail must never hide the training's own result
            self.log.warning("Could not record %s of %s for the UI: %s", key, self.spec.job_name, err)

    # -- early stopping (optional: hyperparameter search trials) ------------------------------------------
    def _trial_monitor(self):
        if not self.early_stopping:
            return None
        return TrialMonitor(self.early_stopping, self.spec.job_name)

    def _watch_metrics_file(self, monitor, request, lock) -> threading.Event:
        """Points the script writes to TRAINING_METRICS_FILE (not the log) are checked once a second."""
        done = threading.Event()
        path = os.path.join(request.job_root, METRICS_STREAM)

        def poll() -> None:
            while not done.wait(1.0):
                self._stop_early(monitor.poll_metrics_file(path, job_root=request.job_root), request, lock)

        threading.Thread(target=poll, name=f"early-stopping-{self.spec.job_name}", daemon=True).start()
        return done

    def _stop_early(self, reason: str | None, request, lock) -> None:
        if reason is None:
            return
        with lock:
            if self._stop_reason is not None:
                return
            self._stop_reason = reason
        self.log.warning("Stopping training %s early: %s", self.spec.job_name, reason)
        self.launcher.stop(request)

    # -- the job root's disk cap (operators/launch/disk_cap.py) -------------------------------------------
    def _say_disk_cap(self, request, *, watched: bool) -> None:
        """One line in the task log: the job root's cap and how it is held here (or that it is not)."""
        cap = request.disk_limit
        if not cap:
            return
        how = []
        if self.launcher.capabilities.caps_file_size:
            how.append("the kernel caps every file the job writes at it (RLIMIT_FSIZE)")
        how += self.files.disk_cap_holds(watched=watched)
        if not how:
            self.log.warning("The job root's disk cap of %s is not enforced on this backend: the job root is in the "
                             "cluster's volume, which this worker does not see; that volume's own quota is the "
                             "limit", human(cap))
            return
        self.log.info("The job root may hold %s (resources.disk, else [training] job_disk_limit): %s", human(cap),
                      "; ".join(how))

    def _watch_disk(self, request):
        def over(line: str) -> None:
            self._over_disk_cap = line
            self.log.error("Stopping training %s: %s", self.spec.job_name, line)
            self.launcher.stop(request)

        watch = self.files.watch_disk(request.job_root, request.disk_limit, over)
        self._say_disk_cap(request, watched=watch is not None)
        return watch

    def _end_stopped_early(self) -> None:
        # Replaces the runtime's "stopped by SIGTERM": this is why it was stopped.
        self.files.record_failure(f"stopped early: {self._stop_reason}", replace=True)
        raise AirflowSkipException(f"training {self.spec.job_name} stopped early: {self._stop_reason}")

    def on_kill(self) -> None:
        try:
            self.launcher.stop(self.launch_request())
        except Exception as err:  # on_kill must not raise; say what may be left behind
            self.log.error("Could not stop training %s: %s", self.spec.job_name, err)


def _stream_view(metrics, job_root: str | None) -> dict:
    """The series so far: matched in the log, and written by the script (and the runtime's system metrics) to
    TRAINING_METRICS_FILE, which joins the collector only at the end."""
    view = MetricCollector()
    view.series = {name: list(points) for name, points in list(metrics.series.items())}
    if job_root is not None:
        view.read_file(os.path.join(job_root, METRICS_STREAM), job_root=job_root)
    return view.series


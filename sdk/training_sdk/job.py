"""A training job submitted to Airflow, named as the training-jobs view names it: the SDK's own jobs are the run
whose id is the job name; a job triggered from the form, --conf, REST or a schedule is found by its job name in the
view's list, and so is a search's trial (one map index of the search's run, its tasks in the "trial." group).

    job = TrainingJob.attach("my-job-20260101-120000")     # or Estimator.attach / est.latest_job
    job.wait()              # streams the training log lines until the job ends; raises TrainingJobError on failure
    job.model_data()        # the model URI (the publish task's result)
    job.metrics()           # {"loss": [{"value", "step", "timestamp"}, ...]}
    job.stop()
    job.reproduce()         # a new run on the same code digest, data versions, image and hyperparameters
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterator, Mapping, TextIO

from training_sdk.errors import TrainingJobError, TrainingSdkError
from training_sdk.session import ApiError, Session

# What the SDK reads of the platform's runs: the stages' task ids (operators/stage_names.py) and the upload result's
# failure (operators/engine/results.py UploadedArtifacts). The SDK installs without the platform (no Airflow, no
# operators/), so it names them here; tests/sdk/test_platform_names.py holds them to the platform's own.
LAUNCH_TASK = "launch_training"
UPLOAD_TASK = "upload_artifacts"
PUBLISH_TASK = "publish_model"
UPLOAD_FAILURE = "failure"
STOP_NOTE_PREFIX = "Stopped by "  # the training-jobs view writes the same (plugins/training_console/stop.py)
TERMINAL_RUN_STATES = ("success", "failed")
# A task try whose log is complete: the try is over.
_TRY_OVER = ("success", "failed", "skipped", "upstream_failed", "up_for_retry", "removed")
_TRY_STARTED = ("running", "deferred", "up_for_reschedule", *_TRY_OVER)
# Log records of the launch task that are the training's own output (the launch stage logs each line with "%s").
_TRAINING_LOGGERS = ("LaunchTrainingOperator",)

STATUS = {"queued": "Pending", "running": "InProgress", "success": "Completed", "failed": "Failed"}
VIEW_STATUS = {"queued": "Pending", "running": "InProgress", "succeeded": "Completed", "failed": "Failed",
               "stopped": "Stopped"}  # the training-jobs view's words -> the SDK's


def _entry_text(entry: Any) -> str:
    if isinstance(entry, Mapping):
        return str(entry.get("event", ""))
    return str(entry)


def _entry_key(entry: Any) -> tuple:
    if isinstance(entry, Mapping):
        return entry.get("timestamp"), entry.get("event"), entry.get("logger")
    return None, str(entry), None


def is_training_line(entry: Any) -> bool:
    """A line the user's script (or the runtime) printed, as opposed to Airflow's own records about the task."""
    if not isinstance(entry, Mapping):
        return False
    logger = str(entry.get("logger") or "")
    return any(logger.endswith(name) for name in _TRAINING_LOGGERS)


def error_of(entries: list[Any]) -> str | None:
    """The exception message of a failed task try's log (the last error record that carries one)."""
    for entry in reversed(entries):
        if not isinstance(entry, Mapping):
            continue
        for detail in reversed(entry.get("error_detail") or []):
            if isinstance(detail, Mapping) and detail.get("exc_value"):
                return str(detail["exc_value"])
    return None


class TrainingJob:
    """A handle on one training job (a DAG run); cheap to create, every property asks the API."""

    def __init__(self, job_name: str, *, dag_id: str = "training_job", session: Session | None = None,
                 poll_seconds: float = 2.0, run_id: str | None = None, map_index: int = -1, task_prefix: str = ""):
        self.job_name = job_name
        self.dag_id = dag_id
        self.session = session or Session()
        self.poll_seconds = poll_seconds
        self.run_id = run_id or job_name
        self.map_index = map_index  # >= 0: a search's trial
        self.task_prefix = task_prefix  # "trial." for a trial

    def __repr__(self) -> str:
        return f"TrainingJob({self.job_name!r}, dag_id={self.dag_id!r})"

    @classmethod
    def attach(cls, job_name: str, *, dag_id: str = "training_job", session: Session | None = None) -> TrainingJob:
        job = cls(job_name, dag_id=dag_id, session=session)
        try:
            job.describe()
            return job
        except ApiError as err:
            if err.status != 404:
                raise
        row = job.session.find_job(job_name)  # any DAG: a name is unique to one run (operators/state/lease.py)
        if row is None:
            raise TrainingSdkError(f"no training job {job_name!r} at {job.session.api_url}; "
                                   f"`training-job list` shows the recent ones")
        return cls(job_name, dag_id=row["dag_id"], session=job.session, run_id=row["run_id"],
                   map_index=int(row["map_index"]), task_prefix=row.get("task_prefix") or "")

    def reproduce(self, *, allow_changed_data: bool = False, job_name: str | None = None) -> TrainingJob:
        """Trigger a run that reproduces this one: the same code digest, data versions, image and hyperparameters, as
        its lineage record says (the view builds the conf; Airflow checks you may trigger its DAG). The new run refuses
        in its first stages, with one line naming the channel, when a channel's data changed since; with
        `allow_changed_data` it trains on the new data. Returns the new job (run id = its job name)."""
        # lazy: the estimator module (packing) is only needed for the name
        from training_sdk.estimator import default_job_name

        found = self.session.reproduction(self.dag_id, self.run_id, self.map_index)
        conf = dict(found["conf"])
        conf["reproduces"] = {**conf["reproduces"], "allow_changed_data": bool(allow_changed_data)}
        conf["job_name"] = job_name or default_job_name(conf.get("base_job_name") or "reproduce")
        self.session.trigger(found["dag_id"], conf["job_name"], conf)
        return TrainingJob(conf["job_name"], dag_id=found["dag_id"], session=self.session,
                           poll_seconds=self.poll_seconds)

    # -- state ------------------------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """The DAG run (for a trial: its search's run)."""
        return self.session.dag_run(self.dag_id, self.run_id)

    @property
    def is_trial(self) -> bool:
        return self.map_index >= 0

    @property
    def status(self) -> str:
        if self.is_trial:  # the run is the whole search's: the trial's own status is the view's
            row = self.session.find_job(self.job_name, self.dag_id) or {}
            return VIEW_STATUS.get(str(row.get("status")), str(row.get("status")))
        return self._status_of(self.describe())

    def _ended(self, run: Mapping[str, Any]) -> bool:
        if self.is_trial:
            return self.status not in ("InProgress", "Pending")
        return run.get("state") in TERMINAL_RUN_STATES

    def _tis(self) -> list[dict[str, Any]]:
        """This job's task instances, keyed by stage name (a trial's without its group prefix)."""
        mine = []
        for ti in self.session.task_instances(self.dag_id, self.run_id):
            task_id = str(ti.get("task_id"))
            if ti.get("map_index", -1) == self.map_index and task_id.startswith(self.task_prefix):
                mine.append({**ti, "stage": task_id[len(self.task_prefix):]})
        return mine

    @staticmethod
    def _status_of(run: Mapping[str, Any]) -> str:
        if run.get("state") == "failed" and _stop_note(run):
            return "Stopped"
        return STATUS.get(str(run.get("state")), str(run.get("state")))

    def is_finished(self) -> bool:
        return self._ended(self.describe())

    def task_states(self) -> dict[str, str | None]:
        return {ti["stage"]: ti.get("state") for ti in self._tis()}

    # -- results ----------------------------------------------------------------------------------------------
    def model_data(self) -> str | None:
        """The model URI (model.tar.gz under <output_path>/<job_name>/output/); None until the job succeeded."""
        return self.session.xcom(self.dag_id, self.run_id, self.task_prefix + PUBLISH_TASK, map_index=self.map_index)

    def metrics(self) -> dict[str, list[dict[str, Any]]]:
        """The metric time series: name -> [{"value", "step", "timestamp"}, ...] (metric_definitions matched in the
        log, plus what the script wrote to TRAINING_METRICS_FILE); live while the job trains."""
        data = self.session.job_metrics(self.dag_id, self.run_id, self.map_index)
        return dict((data or {}).get("series") or {})

    def failure_reason(self) -> str | None:
        """Why the job failed: the error of the first task that failed (a refused spec, a staging error, the
        training's own failure reason), else the failure file the upload stage stored. A stopped job: who stopped it,
        when ("Stopped by <user> at <time> UTC"), never the error of the task the stop killed."""
        if self.is_trial:
            row = self.session.find_job(self.job_name, self.dag_id) or {}
            if row.get("stopped_by"):
                return str(row["stopped_by"])
        note = None if self.is_trial else _stop_note(self.describe())
        if note:
            return note
        tis = [ti for ti in self._tis() if ti.get("state") == "failed"]
        tis.sort(key=lambda ti: ti.get("start_date") or "")
        for ti in tis:
            entries = self._read_try(ti["task_id"], int(ti.get("try_number") or 1), ti.get("map_index", -1))
            reason = error_of(entries)
            if reason:
                return reason
        upload = self.session.xcom(self.dag_id, self.run_id, self.task_prefix + UPLOAD_TASK, map_index=self.map_index)
        if isinstance(upload, Mapping) and isinstance(upload.get(UPLOAD_FAILURE), str) and upload[UPLOAD_FAILURE]:
            return upload[UPLOAD_FAILURE].strip()
        if tis:
            return (f"task {tis[0]['task_id']} failed without an error in its log (its process died before it could "
                    f"report one: see that task's log and the scheduler's)")
        return None

    # -- control ----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the job through the training-jobs view's endpoint: the server records "Stopped by <you> at <time>" and
        marks its unfinished stages failed. Airflow then kills a running task, whose on_kill stops the training's
        processes (or pods); the upload stages keep what it wrote. A finished job is left as it is."""
        if self._ended(self.describe()):
            return
        self.session.stop_job(self.dag_id, self.run_id, self.map_index)

    def wait(self, logs: bool = True, *, timeout: float | None = None, out: TextIO | None = None) -> TrainingJob:
        """Block until the job ends, printing the training log lines as they come (logs=True). Raises
        TrainingJobError with the failure reason when it did not succeed."""
        printer = _printer(out) if logs else (lambda line: None)
        for line in self.stream_logs(follow=True, timeout=timeout, on_stage=_stage_printer() if logs else None):
            printer(line)
        status = self.status
        if status != "Completed":
            raise TrainingJobError(self.job_name, status, self.failure_reason())
        return self

    def logs(self, follow: bool = False, *, out: TextIO | None = None) -> None:
        """Print the training log lines: what there is so far, or (follow=True) until the job ends."""
        printer = _printer(out)
        for line in self.stream_logs(follow=follow):
            printer(line)

    # -- log streaming ----------------------------------------------------------------------------------------
    def _read_try(self, task_id: str, try_number: int, map_index: int = -1) -> list[Any]:
        entries, token = self.session.task_log(self.dag_id, self.run_id, task_id, try_number, map_index=map_index)
        while token:
            more, token = self.session.task_log(self.dag_id, self.run_id, task_id, try_number, token,
                                                map_index=map_index)
            if not more:
                break
            entries += more
        return entries

    def stream_logs(self, follow: bool = True, timeout: float | None = None, task_id: str = LAUNCH_TASK,
                    on_stage: Callable[[str, str], None] | None = None) -> Iterator[str]:
        """Yield the training log lines of every try of the launch task as they are produced, following the REST log
        endpoint's continuation tokens; with follow=False, what exists now. Each retry starts with a marker line.
        `on_stage(task_id, state)` hears every stage's state changes (staging code, prefetching data, uploading)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        tokens: dict[int, str | None] = {}
        seen: dict[int, set] = {}
        done: set[int] = set()
        announced: set[int] = set()
        stages: dict[str, str] = {}
        while True:
            run = self.describe()
            tis = self._tis()
            run_over = run.get("state") in TERMINAL_RUN_STATES or (
                self.is_trial and all(t.get("state") in _TRY_OVER for t in tis if t["stage"] == PUBLISH_TASK))
            if on_stage is not None:
                for t in tis:
                    if t.get("state") and stages.get(t["stage"]) != t["state"]:
                        stages[t["stage"]] = t["state"]
                        on_stage(t["stage"], t["state"])
            ti = next((t for t in tis if t["stage"] == task_id), None)
            current = int((ti or {}).get("try_number") or 0)
            state = (ti or {}).get("state")
            for try_number in range(1, current + 1):
                if try_number in done:
                    continue
                over = try_number < current or state in _TRY_OVER or run_over
                if not over and state not in _TRY_STARTED:
                    continue  # queued: no log yet (reading it now would say "end of log")
                if try_number > 1 and try_number not in announced:
                    announced.add(try_number)
                    yield f"[training_sdk] {task_id}: attempt {try_number}"
                while True:
                    entries, token = self.session.task_log(self.dag_id, self.run_id, self.task_prefix + task_id,
                                                           try_number, tokens.get(try_number),
                                                           map_index=self.map_index)
                    keys = seen.setdefault(try_number, set())
                    for entry in entries:
                        key = _entry_key(entry)
                        if key in keys:
                            continue  # a re-read without a token starts from the top
                        keys.add(key)
                        if is_training_line(entry):
                            yield _entry_text(entry)
                    tokens[try_number] = token
                    if not token or not entries:
                        break
                if token is None and over:
                    done.add(try_number)
            if run_over and all(n in done for n in range(1, current + 1)):
                return
            if not follow:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TrainingSdkError(f"training job {self.job_name} still {self.status} after {timeout} s")
            time.sleep(self.poll_seconds)


def _stop_note(run: Mapping[str, Any]) -> str | None:
    note = str(run.get("note") or "")
    return note if note.startswith(STOP_NOTE_PREFIX) else None


def _stage_printer() -> Callable[[str, str], None]:
    """Stage progress goes to stderr, so stdout carries only the training's own lines."""

    def emit(task_id: str, state: str) -> None:
        if state in ("running", "deferred", "failed", "up_for_retry", "upstream_failed"):
            sys.stderr.write(f"[training_sdk] {task_id}: {state}\n")
            sys.stderr.flush()

    return emit


def _printer(out: TextIO | None) -> Callable[[str], None]:
    def emit(line: str) -> None:
        stream = out or sys.stdout
        stream.write(line + "\n")
        stream.flush()

    return emit

"""A training job submitted to Airflow: one run of the training DAG whose run id is the job name.

    job = TrainingJob.attach("my-job-20260101-120000")     # or Estimator.attach / est.latest_job
    job.wait()              # streams the training log lines until the job ends; raises TrainingJobError on failure
    job.model_data()        # the model URI (the publish task's result)
    job.metrics()           # {"loss": [{"value", "step", "timestamp"}, ...]}
    job.stop()
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterator, Mapping, TextIO

from training_sdk.errors import TrainingJobError, TrainingSdkError
from training_sdk.session import ApiError, Session

LAUNCH_TASK = "launch_training"
UPLOAD_TASK = "upload_artifacts"
PUBLISH_TASK = "publish_model"
STOP_NOTE_PREFIX = "Stopped by "  # the training-jobs view writes the same (plugins/training_console/stop.py)
TERMINAL_RUN_STATES = ("success", "failed")
# A task try whose log is complete: the try is over.
_TRY_OVER = ("success", "failed", "skipped", "upstream_failed", "up_for_retry", "removed")
_UNDER_WAY = ("running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting")
_TRY_STARTED = ("running", "deferred", "up_for_reschedule", *_TRY_OVER)
# Log records of the launch task that are the training's own output (the launch stage logs each line with "%s").
_TRAINING_LOGGERS = ("LaunchTrainingOperator",)

STATUS = {"queued": "Pending", "running": "InProgress", "success": "Completed", "failed": "Failed"}


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
                 poll_seconds: float = 2.0):
        self.job_name = job_name
        self.dag_id = dag_id
        self.session = session or Session()
        self.poll_seconds = poll_seconds

    def __repr__(self) -> str:
        return f"TrainingJob({self.job_name!r}, dag_id={self.dag_id!r})"

    @classmethod
    def attach(cls, job_name: str, *, dag_id: str = "training_job", session: Session | None = None) -> TrainingJob:
        job = cls(job_name, dag_id=dag_id, session=session)
        try:
            job.describe()
        except ApiError as err:
            if err.status == 404:
                raise TrainingSdkError(f"no training job {job_name!r} in DAG {dag_id} at {job.session.api_url}; "
                                       f"`training-job list` shows the recent ones") from None
            raise
        return job

    # -- state ------------------------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return self.session.dag_run(self.dag_id, self.job_name)

    @property
    def status(self) -> str:
        return self._status_of(self.describe())

    @staticmethod
    def _status_of(run: Mapping[str, Any]) -> str:
        if run.get("state") == "failed" and _stop_note(run):
            return "Stopped"
        return STATUS.get(str(run.get("state")), str(run.get("state")))

    def is_finished(self) -> bool:
        return self.describe().get("state") in TERMINAL_RUN_STATES

    def task_states(self) -> dict[str, str | None]:
        return {ti["task_id"]: ti.get("state") for ti in self.session.task_instances(self.dag_id, self.job_name)
                if ti.get("map_index", -1) == -1}

    # -- results ----------------------------------------------------------------------------------------------
    def model_data(self) -> str | None:
        """The model URI (model.tar.gz under <output_path>/<job_name>/output/); None until the job succeeded."""
        return self.session.xcom(self.dag_id, self.job_name, PUBLISH_TASK)

    def metrics(self) -> dict[str, list[dict[str, Any]]]:
        """The metric time series: name -> [{"value", "step", "timestamp"}, ...] (metric_definitions matched in the
        log, plus what the script wrote to TRAINING_METRICS_FILE); live while the job trains."""
        data = self.session.job_metrics(self.dag_id, self.job_name)
        return dict((data or {}).get("series") or {})

    def failure_reason(self) -> str | None:
        """Why the job failed: the error of the first task that failed (a refused spec, a staging error, the
        training's own failure reason), else the failure file the upload stage stored. A stopped job: who stopped it,
        when ("Stopped by <user> at <time> UTC"), never the error of the task the stop killed."""
        note = _stop_note(self.describe())
        if note:
            return note
        tis = [ti for ti in self.session.task_instances(self.dag_id, self.job_name) if ti.get("state") == "failed"]
        tis.sort(key=lambda ti: ti.get("start_date") or "")
        for ti in tis:
            entries = self._read_try(ti["task_id"], int(ti.get("try_number") or 1), ti.get("map_index", -1))
            reason = error_of(entries)
            if reason:
                return reason
        upload = self.session.xcom(self.dag_id, self.job_name, UPLOAD_TASK)
        if isinstance(upload, Mapping) and upload.get("failure"):
            return str(upload["failure"]).strip()
        if tis:
            return (f"task {tis[0]['task_id']} failed without an error in its log (its process died before it could "
                    f"report one: see that task's log and the scheduler's)")
        return None

    # -- control ----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the job: the run gets a note saying so, and its unfinished stages that are under way are marked failed.
        Airflow then kills a running task, whose on_kill stops the training's processes (or pods), and the run fails
        through the scheduler's own rules. (Marking the run itself failed races the scheduler, which may still
        finish it as successful from the task states it already read.) A finished job is left as it is."""
        if self.describe().get("state") in TERMINAL_RUN_STATES:
            return
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        who = "a token's owner" if self.session._fixed_token else self.session.username  # a token names no user here
        self.session.set_run_note(self.dag_id, self.job_name, f"{STOP_NOTE_PREFIX}{who} at {when} UTC (training_sdk)")
        for _ in range(30):  # between two stages nothing is under way for a moment: look again
            busy = [ti for ti in self.session.task_instances(self.dag_id, self.job_name)
                    if ti.get("state") in _UNDER_WAY and ti["task_id"] not in (UPLOAD_TASK, PUBLISH_TASK)]
            for ti in busy:
                try:
                    self.session.set_task_state(self.dag_id, self.job_name, ti["task_id"], "failed",
                                                ti.get("map_index", -1))
                except ApiError as err:
                    if err.status not in (400, 404, 409):  # it finished meanwhile
                        raise
            if busy or self.describe().get("state") in TERMINAL_RUN_STATES:
                return
            time.sleep(1)
        raise TrainingSdkError(f"could not stop {self.job_name}: no stage of it is under way")

    def wait(self, logs: bool = True, *, timeout: float | None = None, out: TextIO | None = None) -> TrainingJob:
        """Block until the job ends, printing the training log lines as they come (logs=True). Raises
        TrainingJobError with the failure reason when it did not succeed."""
        printer = _printer(out) if logs else (lambda line: None)
        for line in self.stream_logs(follow=True, timeout=timeout, on_stage=_stage_printer() if logs else None):
            printer(line)
        run = self.describe()
        if run.get("state") != "success":
            status = self._status_of(run)
            reason = self.failure_reason()
            raise TrainingJobError(self.job_name, status, reason)
        return self

    def logs(self, follow: bool = False, *, out: TextIO | None = None) -> None:
        """Print the training log lines: what there is so far, or (follow=True) until the job ends."""
        printer = _printer(out)
        for line in self.stream_logs(follow=follow):
            printer(line)

    # -- log streaming ----------------------------------------------------------------------------------------
    def _read_try(self, task_id: str, try_number: int, map_index: int = -1) -> list[Any]:
        entries, token = self.session.task_log(self.dag_id, self.job_name, task_id, try_number, map_index=map_index)
        while token:
            more, token = self.session.task_log(self.dag_id, self.job_name, task_id, try_number, token,
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
            run_over = run.get("state") in TERMINAL_RUN_STATES
            tis = self.session.task_instances(self.dag_id, self.job_name)
            if on_stage is not None:
                for t in tis:
                    if t.get("map_index", -1) == -1 and t.get("state") and stages.get(t["task_id"]) != t["state"]:
                        stages[t["task_id"]] = t["state"]
                        on_stage(t["task_id"], t["state"])
            ti = next((t for t in tis if t["task_id"] == task_id and t.get("map_index", -1) == -1), None)
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
                    entries, token = self.session.task_log(self.dag_id, self.job_name, task_id, try_number,
                                                           tokens.get(try_number))
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

"""HyperparameterTuner: a search over hyperparameters, run by the hyperparameter_search DAG (one training job per trial).

    tuner = HyperparameterTuner(est, objective_metric_name="loss",
                                hyperparameter_ranges={"lr": ContinuousParameter(0.01, 1, "Logarithmic"),
                                                       "epochs": IntegerParameter(2, 6)},
                                max_trials=8, strategy="random", early_stopping="median")
    tuner.fit({"train": "s3://bucket/train/"})
    tuner.best_training_job()     # the best trial's job name (a TrainingJob via tuner.best_job)
    tuner.model_data()            # the best trial's model URI

SageMaker's argument names (objective_type "Minimize"/"Maximize", max_jobs, early_stopping_type "Off"/"Auto") are
accepted too. The search DAG's trials run at most [training] max_concurrent_trials at once (an Airflow setting).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from training_sdk.errors import TrainingJobError, TrainingSdkError
from training_sdk.estimator import Estimator, default_job_name
from training_sdk.job import LAUNCH_TASK, TrainingJob

# The search DAG's tasks the tuner reads (operators/pipelines/search.py): the summary of every trial, the best model.
SUMMARY_TASK, BEST_MODEL_TASK = "summarize", "publish_best_model"

SEARCH_DAG = "hyperparameter_search"


@dataclass(frozen=True)
class ContinuousParameter:
    min_value: float
    max_value: float
    scaling_type: str = "Auto"  # Auto/Linear: uniform; Logarithmic: log-uniform

    def to_space(self) -> dict[str, Any]:
        kind = "log_uniform" if self.scaling_type.lower().startswith("log") else "uniform"
        return {"type": kind, "min": self.min_value, "max": self.max_value}


@dataclass(frozen=True)
class IntegerParameter:
    min_value: int
    max_value: int
    step: int = 1

    def to_space(self) -> dict[str, Any]:
        return {"type": "int", "min": self.min_value, "max": self.max_value, "step": self.step}


@dataclass(frozen=True)
class CategoricalParameter:
    values: Sequence[Any]

    def to_space(self) -> dict[str, Any]:
        return {"type": "choice", "values": list(self.values)}


def _space(ranges: Mapping[str, Any]) -> dict[str, Any]:
    return {name: (r.to_space() if hasattr(r, "to_space") else r) for name, r in ranges.items()}


class HyperparameterTuner:
    def __init__(self, estimator: Estimator, objective_metric_name: str | None = None,
                 hyperparameter_ranges: Mapping[str, Any] | None = None, *, objective: str | None = None,
                 ranges: Mapping[str, Any] | None = None, metric_definitions: list | None = None,
                 direction: str | None = None, objective_type: str | None = None, max_trials: int | None = None,
                 max_jobs: int | None = None, strategy: str = "random", early_stopping: str | None = None,
                 early_stopping_type: str | None = None, seed: int | None = None, base_tuning_job_name: str | None = None,
                 dag_id: str = SEARCH_DAG):
        self.estimator = estimator
        self.objective = objective or objective_metric_name
        if not self.objective:
            raise TrainingSdkError("give objective (objective_metric_name): the metric the search optimises")
        self.ranges = dict(ranges or hyperparameter_ranges or {})
        if not self.ranges:
            raise TrainingSdkError("give ranges (hyperparameter_ranges): hyperparameter -> range")
        self.metric_definitions = list(metric_definitions or estimator.metric_definitions)
        if objective_type and not direction:
            direction = "maximize" if objective_type.lower().startswith("max") else "minimize"
        self.direction = (direction or "minimize").lower()
        self.max_trials = max_trials or max_jobs or 8
        self.strategy = strategy.lower()
        if early_stopping is None:
            early_stopping = {"auto": "median", "off": "none"}.get((early_stopping_type or "off").lower(), "none")
        self.early_stopping = early_stopping
        self.seed = seed
        self.base_tuning_job_name = base_tuning_job_name
        self.dag_id = dag_id
        self.latest_tuning_job: TrainingJob | None = None

    def search_spec(self, inputs: Mapping[str, str] | None = None, job_name: str | None = None) -> dict[str, Any]:
        base = self.base_tuning_job_name or f"{self.estimator._base_name()}-search"
        spec = self.estimator.job_spec(inputs, job_name or default_job_name(base)[:58].rstrip("-"))
        spec.update({
            "metric_definitions": self.metric_definitions,
            "objective": self.objective,
            "direction": self.direction,
            "search_space": _space(self.ranges),
            "strategy": self.strategy,
            "max_trials": self.max_trials,
            "early_stopping": self.early_stopping,
        })
        if self.seed is not None:
            spec["seed"] = self.seed
        return spec

    def fit(self, inputs: Mapping[str, str] | None = None, wait: bool = True, logs: bool = True,
            job_name: str | None = None) -> TrainingJob:
        """Start the search; with wait=True block until it ends (printing each trial's status changes) and raise
        TrainingJobError when no trial produced a model."""
        if self.estimator.is_local:
            raise TrainingSdkError("HyperparameterTuner runs on Airflow: use an estimator without instance_type='local'")
        spec = self.search_spec(inputs, job_name)
        self.latest_tuning_job = self.estimator._submit(spec, self.dag_id)
        if wait:
            self.wait(logs=logs)
        return self.latest_tuning_job

    def wait(self, logs: bool = True) -> None:

        job = self._job()
        reported: dict[tuple[str, int], str] = {}
        while True:
            run = job.describe()
            if logs:
                for ti in job.session.task_instances(job.dag_id, job.job_name):
                    key = (ti["task_id"], ti.get("map_index", -1))
                    if ti["task_id"].endswith((LAUNCH_TASK, SUMMARY_TASK)) and ti.get("state") and \
                            reported.get(key) != ti["state"]:
                        reported[key] = ti["state"]
                        where = f"trial {key[1] + 1}" if key[1] >= 0 else key[0]
                        print(f"[training_sdk] {job.job_name}: {where} {ti['state']}", file=sys.stdout, flush=True)
            if run.get("state") in ("success", "failed"):
                break
            time.sleep(job.poll_seconds)
        if run.get("state") != "success":
            raise TrainingJobError(job.job_name, job._status_of(run), job.failure_reason())

    def _job(self) -> TrainingJob:
        if self.latest_tuning_job is None:
            raise TrainingSdkError("no search yet: call fit() first")
        return self.latest_tuning_job

    def summary(self) -> dict[str, Any] | None:
        """Every trial (params, status, objective value, model URI) and the best one (the search's summarize task)."""
        job = self._job()
        return job.session.xcom(job.dag_id, job.job_name, SUMMARY_TASK)

    def best_training_job(self) -> str:
        summary = self.summary() or {}
        best = summary.get("best")
        if not best:
            raise TrainingSdkError(f"search {self._job().job_name} has no best trial (yet)")
        return best["job_name"]

    @property
    def best_job(self) -> TrainingJob:
        """The best trial as a job: its metrics() and logs() are a training job's (dag_id of the search)."""
        job = self._job()
        return _TrialJob(self.best_training_job(), job)

    def model_data(self) -> str | None:
        """The best trial's model URI (the search's publish_best_model result)."""
        job = self._job()
        return job.session.xcom(job.dag_id, job.job_name, BEST_MODEL_TASK)

    def best_estimator(self) -> Estimator:
        """The estimator with the best trial's hyperparameters (fit() it again, e.g. on more data)."""
        summary = self.summary() or {}
        best = summary.get("best") or {}
        est = Estimator(**{k: getattr(self.estimator, k) for k in (
            "entry_point", "command", "source_dir", "image_uri", "instance_type", "instance_count", "layout",
            "backend", "output_path", "checkpoint_path", "metric_definitions", "max_run_seconds", "environment",
            "base_job_name", "resources", "distribution")}, session=self.estimator.session,
            hyperparameters={**self.estimator.hyperparameters, **dict(best.get("params") or {})})
        est.latest_job = self.best_job
        return est


class _TrialJob(TrainingJob):
    """A trial of a search: its artifacts and metrics are those of job `name`; its run is the search's."""

    def __init__(self, name: str, search: TrainingJob):
        super().__init__(name, dag_id=search.dag_id, session=search.session)
        self.search = search

    def describe(self) -> dict[str, Any]:
        return self.search.describe()

    def _row(self) -> dict[str, Any]:
        summary = self.session.xcom(self.dag_id, self.search.job_name, SUMMARY_TASK) or {}
        return next((row for row in summary.get("trials", []) if row["job_name"] == self.job_name), {})

    def model_data(self) -> str | None:
        return self._row().get("model_uri")

    def metrics(self) -> dict[str, list[dict[str, Any]]]:
        index = self._row().get("index")
        data = None if index is None else self.session.job_metrics(self.dag_id, self.search.job_name, index)
        return dict((data or {}).get("series") or {})

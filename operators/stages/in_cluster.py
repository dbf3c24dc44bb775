"""A stage's work where the job's backend keeps its data plane (Kubernetes with [training.kubernetes] data_plane =
cluster): the same stage code, run in a platform pod that mounts the cluster's workspace, while the Airflow task
submits it, streams its log and returns its result (operators/launch/kubernetes/steps.py).

`runs_in_cluster` decorates a stage's execute. On the worker it asks the spec's launcher whether the backend runs the
data plane itself; if so the stage's rendered fields (the validated spec, the channels) go to the step as JSON and the
task's outcome is the step's: its result becomes the task's XCom, a skip is a skip, a failure no retry can fix fails
the task at once, anything else is retried as the task's retries say. In the step's pod (TRAINING_STEP set),
`python -m operators.stages.step_pod` builds the same operator and runs the decorated execute, which then does the
work where it is.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from operators.airflow_compat import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
)

from operators.launch.registry import launcher_for
from operators.launch.steps import STEP_ENV, StepError
from operators.settings import training_settings_env

STEP_COMMAND = ["python3", "-m", "operators.stages.step_pod"]


def in_step_pod() -> bool:
    return STEP_ENV in os.environ


def runs_in_cluster(execute):
    """Decorates a stage's execute(self, context): the step in the cluster when the backend says so (see above)."""

    @functools.wraps(execute)
    def wrapper(self, context):
        step = None if in_step_pod() else _cluster_step(self)
        if step is None:
            return execute(self, context)
        return _run_step(self, context, step)

    # Where the step's pod enters (operators/stages/step_pod.py); functools.wraps copies the attribute to the wrappers
    # Airflow and the failure-reason recorder put around it, so the class's execute names it.
    wrapper.step_entry = wrapper
    return wrapper


def _cluster_step(op) -> Any | None:
    """The backend's runner for this stage's step, or None: the work happens here."""
    if not op.job:
        return None  # nothing validated: the stage says so itself (a skip), no pod needed for that

    launcher = launcher_for(op.spec.backend)
    runner = getattr(launcher, "cluster_step", None)
    if runner is None:
        return None
    return runner(op.spec.job_name, op.spec.backend_options(), op.task_id.rsplit(".", 1)[-1],
                  on_line=lambda line: op.log.info("%s", line))


def _run_step(op, context, step) -> Any:
    ti = context.get("ti")
    payload = {"operator": f"{type(op).__module__}:{type(op).__qualname__}", "task_id": op.task_id,
               "dag_id": op.dag_id, "run_id": context["run_id"], "try_number": getattr(ti, "try_number", 1),
               "fields": op.step_fields(context)}
    op._cluster_step = step  # on_kill stops it
    try:
        outcome = step.run(workspace=op.settings.workspace, command=STEP_COMMAND, payload=payload,
                           settings_env=training_settings_env(op.settings.workspace))
    except StepError as err:
        raise (AirflowFailException if err.permanent else AirflowException)(str(err)) from None
    if outcome.skipped is not None:
        raise AirflowSkipException(outcome.skipped)
    if outcome.failed is not None:
        raise AirflowFailException(outcome.failed)
    if outcome.error is not None:
        raise AirflowException(outcome.error)
    return outcome.result

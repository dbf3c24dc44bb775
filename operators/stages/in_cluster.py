"""A stage's work where the job's backend keeps its data plane (Kubernetes with [training.kubernetes] data_plane =
cluster): the same stage code, run in a platform pod that mounts the cluster's workspace, while the Airflow task
submits it, streams its log and returns its result (operators/launch/kubernetes/steps.py).

`runs_in_cluster` decorates a stage's execute. On the worker it reads the backend's declaration (whether it runs steps,
where the job's files are: operators/launch/declaration.py); if the data plane is the cluster's, the stage's name, the
validated spec and the stage's inputs (the channels, the metrics) go to the step as JSON and the
task's outcome is the step's: its result becomes the task's XCom, a skip is a skip, a failure no retry can fix fails
the task at once, anything else is retried as the task's retries say. In the step's pod (TRAINING_STEP set),
`python -m operators.engine.step` runs the stage's engine function (the operator's `engine_stage`) from those
primitives, without Airflow, and does the work where it is.
"""

from __future__ import annotations

import functools
from typing import Any

from operators.airflow_compat import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
)

from operators.launch.registry import declaration_for, launcher_for
from operators.launch.steps import StepError
from operators.settings import training_settings_env

STEP_COMMAND = ["python3", "-m", "operators.engine.step"]


def runs_in_cluster(execute):
    """Decorates a stage's execute(self, context): the step in the cluster when the backend says so (see above)."""

    @functools.wraps(execute)
    def wrapper(self, context):
        step = _cluster_step(self)
        if step is None:
            return execute(self, context)
        return _run_step(self, context, step)

    return wrapper


def _cluster_step(op) -> Any | None:
    """The backend's runner for this stage's step, or None: the work happens here."""
    if not op.job or op.engine_stage is None:
        return None  # nothing validated: the stage says so itself (a skip), no pod needed for that
    if not declaration_for(op.spec.backend).steps or op.cluster_workspace is None:
        return None  # the backend runs no steps, or this job's data plane is the worker's
    return launcher_for(op.spec.backend).cluster_step(op.spec.job_name, op.spec.backend_options(),
                                                       op.task_id.rsplit(".", 1)[-1],
                                                       on_line=lambda line: op.log.info("%s", line))


def _run_step(op, context, step) -> Any:
    ti = context.get("ti")
    payload = {"stage": op.engine_stage, "task_id": op.task_id, "dag_id": op.dag_id, "run_id": context["run_id"],
               "try_number": getattr(ti, "try_number", 1), "owner": op.job_owner, "job": op.job,
               "inputs": op.step_inputs(context)}
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

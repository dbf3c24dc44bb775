"""The entry point of a data-plane step's pod: `python -m operators.stages.step_pod` (operators/stages/in_cluster.py
submits it). It builds the stage's operator from TRAINING_STEP, runs its work here, on the cluster's workspace, and
reports the outcome where the kubelet keeps it for the worker (operators/launch/steps.py's report_outcome)."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import traceback

from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from operators.launch.steps import STEP_ENV, report_outcome


def _step_entry(operator_class: type):
    """The class's execute below Airflow's wrappers (the task-runner guard, the failure-reason recorder, which need
    a task instance the pod has not: the worker records the reason from the outcome): the in_cluster decorator's."""
    execute = getattr(operator_class.execute, "step_entry", None)
    if execute is None:
        raise TypeError(f"{operator_class.__name__}.execute is not decorated with runs_in_cluster")
    return execute


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s",
                        force=True)
    payload = json.loads(os.environ[STEP_ENV])

    try:
        module, _, name = payload["operator"].partition(":")
        operator_class = getattr(importlib.import_module(module), name)
        with DAG(payload["dag_id"], schedule=None):
            op = operator_class(task_id=payload["task_id"], **payload["fields"])
        result = _step_entry(operator_class)(op, {"run_id": payload["run_id"], "dag_id": payload["dag_id"]})
    except AirflowSkipException as err:
        report_outcome({"skip": str(err)})
        return 0
    except AirflowFailException as err:
        report_outcome({"fail": str(err)})
        return 1
    except Exception as err:  # noqa: BLE001 - reported to the worker, which retries it as the task's retries say
        traceback.print_exc(file=sys.stdout)
        report_outcome({"error": f"{type(err).__name__}: {err}"})
        return 1
    report_outcome({"result": result})
    return 0


def exit_now(code: int) -> None:
    """End the pod's process once the outcome is written and the log flushed, without the interpreter's teardown: with
    Airflow imported that is ~0.3 s of every step's life (1.52 -> 1.19 s for the import alone, measured), and nothing
    is left for it to do (the stages close their files and temporary directories themselves)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())

"""The entry point of a data-plane step's pod: `python -m operators.stages.step_pod` (operators/stages/in_cluster.py
submits it). It builds the stage's operator from TRAINING_STEP, runs its work here, on the cluster's workspace, and
reports the outcome where the kubelet keeps it for the worker (operators/launch/steps.py's report_outcome)."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys

from airflow.sdk import DAG
# Airflow's own triggerer command turns masking on through this module too (the Task SDK has no public accessor).
from airflow.sdk._shared.secrets_masker import SecretsMasker, _secrets_masker
from operators.airflow_compat import AirflowFailException, AirflowSkipException

from operators.launch.steps import STEP_ENV, report_outcome

log = logging.getLogger(__name__)


def _step_entry(operator_class: type):
    """The class's execute below Airflow's wrappers (the task-runner guard, the failure-reason recorder, which need
    a task instance the pod has not: the worker records the reason from the outcome): the in_cluster decorator's."""
    execute = getattr(operator_class.execute, "step_entry", None)
    if execute is None:
        raise TypeError(f"{operator_class.__name__}.execute is not decorated with runs_in_cluster")
    return execute


def masked_log_output():
    """Log to stdout (the worker streams it into the task's log, which whoever triggers the DAG reads) through
    Airflow's secrets masker, and turn masking on: a task process gets both from the task runner, which a step does
    not run, so the connections the step reads (the admin's storage Secret) would reach the log in clear. The masker
    knows each connection's password and extra once the hooks have read it. Returns the masker."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s",
                        force=True)
    SecretsMasker.enable_log_masking()
    masker = _secrets_masker()
    for handler in logging.getLogger().handlers:
        handler.addFilter(masker)
    return masker


def main() -> int:
    masker = masked_log_output()
    payload = json.loads(os.environ[STEP_ENV])

    def report(message: dict) -> None:
        # The outcome reaches the task's log and XComs too. Its text is redacted, not the dict: the masker also hides
        # the value of any key that looks sensitive, and a result's keys are the job's own names (a channel
        # "tokenizer" would lose its cache entry).
        report_outcome(json.loads(masker.redact(json.dumps(message, default=str))))

    try:
        module, _, name = payload["operator"].partition(":")
        operator_class = getattr(importlib.import_module(module), name)
        with DAG(payload["dag_id"], schedule=None):
            op = operator_class(task_id=payload["task_id"], **payload["fields"])
        result = _step_entry(operator_class)(op, {"run_id": payload["run_id"], "dag_id": payload["dag_id"]})
    except AirflowSkipException as err:
        report({"skip": str(err)})
        return 0
    except AirflowFailException as err:
        report({"fail": str(err)})
        return 1
    except Exception as err:  # noqa: BLE001 - reported to the worker, which retries it as the task's retries say
        log.exception("The step failed")
        report({"error": f"{type(err).__name__}: {err}"})
        return 1
    report({"result": result})
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

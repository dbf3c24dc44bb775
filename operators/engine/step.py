"""The entry point of a data-plane step's pod: `python -m operators.engine.step` (operators/stages/in_cluster.py submits
it). It runs the stage's engine function from TRAINING_STEP's primitives ({"stage", "job", "owner", "dag_id",
"run_id", "inputs"}: the validated spec and the stage's inputs), here, on the cluster's workspace, and reports the
outcome where the kubelet keeps it for the worker (operators/launch/steps.py's report_outcome): {"result"} (the
result's to_dict(), the task's XCom), {"skip"}, {"fail"} (no retry can fix it) or {"error"} (the task's retries may).
No operator, no DAG, no Airflow: settings and connections come from the pod's environment (operators/step_process.py)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Callable, Mapping

from operators import log_masking
from operators.engine.context import JobContext
from operators.engine.errors import StageFailed, StageSkipped, failing_fast
from operators.jobspec.errors import SpecError
from operators.jobspec.validated import ValidatedSpec
from operators.launch.steps import OUTCOME_BYTES, STEP_ENV, report_outcome

log = logging.getLogger(__name__)


def _stage_code(ctx: JobContext, **inputs: Any):
    # lazy: the stage's own engine module (its storage and cache clients) only for that stage
    from operators.engine.transfers import stage_code

    # validate_spec, on the worker, had no storage identity for the owner records: the step checks them first
    return stage_code(ctx, check_locations=True, **inputs)


def _prefetch_data(ctx: JobContext, **inputs: Any):
    # lazy: the stage's own engine module (its storage and cache clients) only for that stage
    from operators.engine.transfers import prefetch_data

    return prefetch_data(ctx, **inputs)


def _write_configs(ctx: JobContext, **inputs: Any):
    # lazy: the stage's own engine module only for that stage
    from operators.engine.transfers import write_configs

    return write_configs(ctx, **inputs)


def _restore(ctx: JobContext, **inputs: Any):
    # lazy: the stage's own engine module (its storage clients) only for that stage
    from operators.engine.transfers import restore

    return restore(ctx, **inputs)


def _upload_artifacts(ctx: JobContext, **inputs: Any):
    # lazy: the stage's own engine module (its storage clients) only for that stage
    from operators.engine.upload import upload_artifacts

    return upload_artifacts(ctx, **inputs)


# The stages a step can run: an operator's `engine_stage` (operators/stages/) names one.
STAGES: dict[str, Callable[..., Any]] = {
    "stage_code": _stage_code,
    "prefetch_data": _prefetch_data,
    "write_configs": _write_configs,
    "restore": _restore,
    "upload_artifacts": _upload_artifacts,
}


def masked_log_output() -> None:
    """Log to stdout (the worker streams it into the task's log, which whoever triggers the DAG reads) with the
    connections' secrets masked (operators/log_masking.py): a task process gets Airflow's masker from the task runner,
    which a step does not run, so the connections the step reads (the admin's storage Secret) would reach the log in
    clear. The connection reader registers each secret as it reads it (operators/storage/env_connections.py)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s",
                        force=True)
    log_masking.mask_handlers()


def run_stage(payload: Mapping[str, Any], settings: Any = None) -> dict[str, Any]:
    """The stage's outcome for a step's payload: {"result": ...}, {"skip": ...}, {"fail": ...} or {"error": ...}.
    `settings`: the [training] settings (default: this process's, the cluster's workspace)."""
    try:
        stage = STAGES.get(payload.get("stage") or "")
        if stage is None:
            raise ValueError(f"no stage {payload.get('stage')!r} runs as a step (one of {', '.join(STAGES)})")
        if settings is None:
            # lazy: [training] from this pod's environment (operators/step_process.py), only where it runs
            from operators.settings import training_settings

            settings = training_settings()
        try:  # the spec the worker validated, read without pydantic (operators/jobspec/validated.py says why)
            spec = ValidatedSpec(payload["job"])
        except SpecError as err:
            raise StageFailed(f"invalid job spec: {err}") from None  # the same payload again fails the same way
        with failing_fast():
            ctx = JobContext(payload["job"], dag_id=payload["dag_id"], run_id=payload["run_id"], settings=settings,
                             owner=payload.get("owner"), log=logging.getLogger("operators.engine.step"), spec=spec)
            result = stage(ctx, **dict(payload.get("inputs") or {}))
    except StageSkipped as err:
        return {"skip": err.reason}
    except StageFailed as err:
        return {"fail": err.reason}
    except Exception as err:  # noqa: BLE001 - reported to the worker, which retries it as the task's retries say
        log.exception("The step failed")
        return {"error": f"{type(err).__name__}: {err}"}
    outcome = {"result": result.to_dict()}
    if payload.get("stage") == "upload_artifacts":
        _carry_lineage(outcome, ctx)
    return outcome


def _carry_lineage(outcome: dict[str, Any], ctx: JobContext) -> None:
    """The kept lineage record rides in the upload's result (LINEAGE_CARRIED), where it fits: the worker, which cannot
    read the cluster's workspace nor (holding no storage credentials) the published copy, keeps it for the console and
    Reproduce (operators/stages/upload_artifacts.py)."""
    from operators.lineage.record import LINEAGE_CARRIED, carried_record  # lazy: only the upload's step needs it

    room = OUTCOME_BYTES - len(json.dumps(outcome, separators=(",", ":"), default=str)) - len(LINEAGE_CARRIED) - 16
    packed = carried_record(ctx.settings.workspace, ctx.spec.job_name, room) if room > 0 else None
    if packed is not None:
        outcome["result"][LINEAGE_CARRIED] = packed
    elif outcome["result"].get("lineage_uri"):
        log.warning("The lineage record does not fit the step's result: the worker keeps no copy of it (it is "
                    "published at %s)", outcome["result"]["lineage_uri"])


def main() -> int:
    started = time.monotonic()
    masked_log_output()
    payload = json.loads(os.environ[STEP_ENV])
    outcome = run_stage(payload)
    # What the step's process loaded, said in the task's log (the data-plane test reads it): a step never needs Airflow.
    log.info("Step %s done in %.2f s; Airflow %s", payload.get("stage"), time.monotonic() - started,
             "was imported" if "airflow" in sys.modules else "not imported")
    # The outcome reaches the task's log and XComs too. Its text is redacted, not the dict: the masker also hides the
    # value of any key that looks sensitive, and a result's keys are the job's own names (a channel "tokenizer" would
    # lose its cache entry).
    report_outcome(json.loads(log_masking.redact(json.dumps(outcome, default=str))))
    return 0 if "result" in outcome or "skip" in outcome else 1


def exit_now(code: int) -> None:
    """End the pod's process once the outcome is written and the log flushed, without the interpreter's teardown
    (nothing is left for it to do: the stages close their files and temporary directories themselves)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())

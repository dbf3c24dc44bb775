"""Why a stage failed, kept where the training-jobs view reads it: the exception's message as the task's XCom
"failure_reason" (a failed task returns no XCom). Without it the view could only say "see the task's log" for the
most common mistakes: a spec refused by validate_spec, a path outside local_roots, a source that does not exist.

The messages are the platform's own one-liners (a refused spec names the field, a storage error names the URI and
never a credential; the launch stage's message is redacted of the job's secrets), so they are safe to show to whoever
may read the DAG's runs."""

from __future__ import annotations

import functools
import logging

from operators.airflow_compat import AirflowSkipException, TaskDeferred

log = logging.getLogger(__name__)

FAILURE_REASON_KEY = "failure_reason"
MAX_CHARS = 2000


def failure_text(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


def records_failure_reason(execute):
    """Decorates an operator's execute: an exception it raises is pushed as XCom "failure_reason", then re-raised
    unchanged (a skip or a deferral is no failure)."""

    @functools.wraps(execute)
    def wrapper(self, context, *args, **kwargs):
        try:
            return execute(self, context, *args, **kwargs)
        except (AirflowSkipException, TaskDeferred):
            raise
        except Exception as err:
            try:
                context["ti"].xcom_push(key=FAILURE_REASON_KEY, value=failure_text(err))
            except Exception as push_err:  # noqa: BLE001 - the view's detail must never hide the failure itself
                log.warning("Could not record the failure reason for the view: %s", push_err)
            raise

    return wrapper

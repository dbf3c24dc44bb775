"""A stage's OpenLineage: what its `get_openlineage_facets_on_complete(task_instance)` gives the openlineage provider
(the listener Airflow's own operators report through), built from the validated spec and what the stage returned
(operators/lineage/openlineage.py operator_lineage): stage_code the code with its digest, prefetch_data the channels
with their data versions, restore the parent model, the upload and publish_model every input and the model.

Cheap and best effort: no storage is read, nothing but the spec and the results the task already holds; a lineage that
cannot be built is a warning in the task's log and None (the provider then reports the task without datasets), never
a failed task. The provider and the client are imported only here, when the provider asks (never at DAG parse)."""

from __future__ import annotations

import functools
import logging
from typing import Any, Mapping

log = logging.getLogger(__name__)

# Where an operator keeps what its execute returned, for the provider's call after it.
RESULT_ATTR = "_stage_result"


def keeps_result(execute):
    """Decorates an operator's execute (or execute_complete): its return value is kept on the operator."""

    @functools.wraps(execute)
    def wrapper(self, context, *args, **kwargs):
        result = execute(self, context, *args, **kwargs)
        setattr(self, RESULT_ATTR, result)
        return result

    return wrapper


def stage_lineage(job: Mapping[str, Any] | None, stage: str | None, *, dag_id: str, run_id: str,
                  results: Mapping[str, Any], logger: logging.Logger | logging.LoggerAdapter | None = None):
    """The provider's OperatorLineage of `stage` (operators/lineage/openlineage.py's stage names) for the run of `job`,
    from the stages' results (build_record's keyword arguments: stage_code, prefetch, restore, upload, ...); None when
    there is nothing to report or it cannot be built (a warning)."""
    if not job or stage is None:
        return None
    try:
        # lazy: the record's builder and the provider, only when the provider asks for a stage's lineage
        from operators.lineage.openlineage import operator_lineage
        from operators.lineage.record import build_record

        given = {name: value for name, value in results.items() if isinstance(value, Mapping)}
        # versions={}: no facet names them, and reading every distribution's metadata is no cost worth a task's end
        record = build_record(job, dag_id=dag_id, run_id=run_id, versions={}, **given)
        return operator_lineage(record, stage)
    except Exception as err:  # noqa: BLE001 - lineage is best effort: it must never fail the task it describes
        (logger or log).warning("Could not build the OpenLineage datasets of stage %s (reported without them): %s",
                                stage, err)
        return None


__all__ = ["RESULT_ATTR", "keeps_result", "stage_lineage"]

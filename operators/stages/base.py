"""What every stage after validation shares: the validated spec (from XCom), its job root and its hooks; and the
adapter's half of the job engine (operators/engine/): the JobContext a stage's engine function is given, and its
StageSkipped / StageFailed turned into Airflow's skip and fail."""

from __future__ import annotations

import functools
from dataclasses import replace
from functools import cached_property
from typing import Any, Mapping

from airflow.sdk import BaseOperator
from operators.airflow_compat import AirflowFailException, AirflowSkipException
from training_runtime.layouts import layout_for

from operators.engine.context import JobContext
from operators.engine.errors import StageFailed, StageSkipped, failing_fast
from operators.jobspec.model import JobSpec
from operators.jobspec.ownership import OWNER_KEY, dag_owner
from operators.launch.registry import declaration_for
from operators.settings import training_settings
from operators.stages.failure_reasons import records_failure_reason
from operators.stages.openlineage_facets import RESULT_ATTR, keeps_result, stage_lineage


def engine_errors(execute):
    """Decorates an adapter's execute: the engine's StageSkipped skips the task, StageFailed fails it at once, without
    its retries (as do storage errors no retry can fix and refused archives: operators/engine/errors.py
    failing_fast); everything else is raised as it is, for the task's retries (operators/pipelines/template.py)."""

    @functools.wraps(execute)
    def wrapper(self, context):
        try:
            with failing_fast():
                return execute(self, context)
        except StageSkipped as err:
            raise AirflowSkipException(err.reason) from None
        except StageFailed as err:
            raise AirflowFailException(err.reason) from None

    return wrapper


# The name the transfer stages used before the engine: the same decorator.
storage_failures_fail_fast = engine_errors


class JobStageOperator(BaseOperator):
    """A stage of one training job. `job` is the validated spec dict, usually the validate task's XComArg."""

    template_fields = ("job",)
    ui_color = "#e8f4fd"

    def __init_subclass__(cls, **kwargs):
        """Every stage's failure says why in the training-jobs view (operators/stages/failure_reasons.py); its result
        is kept for its OpenLineage datasets (operators/stages/openlineage_facets.py)."""
        super().__init_subclass__(**kwargs)
        for name in ("execute", "execute_complete"):
            if name in vars(cls):
                setattr(cls, name, records_failure_reason(keeps_result(vars(cls)[name])))

    def __init__(self, *, job: Mapping[str, Any] | Any, **kwargs):
        super().__init__(**kwargs)
        self.job = job

    @cached_property
    def spec(self):
        return JobSpec.from_dict(self.job)

    @property
    def job_owner(self) -> str:
        """The run's owner, as validate_spec found it (operators/jobspec/ownership.py); a spec validated before owners
        were recorded is its DAG's."""
        return (self.job or {}).get(OWNER_KEY) or dag_owner(self.dag_id)

    # The stage's engine function's name in the cluster's step (operators/engine/step.py STAGES); None: no step.
    engine_stage: str | None = None
    # The stage's name in OpenLineage (operators/lineage/openlineage.py operator_lineage) and build_record's keyword
    # for its result (operators/lineage/record.py); None: the stage reports no datasets.
    lineage_stage: str | None = None
    lineage_result: str | None = None

    def lineage_results(self, result: Any) -> dict[str, Any]:
        """The stages' results this stage's lineage is built from: its own (what execute returned)."""
        return {self.lineage_result: result} if self.lineage_result else {}

    def get_openlineage_facets_on_complete(self, task_instance):
        """The openlineage provider's hook: this stage's inputs (and the model, for the upload) with their versions;
        best effort (operators/stages/openlineage_facets.py)."""
        return stage_lineage(self.job, self.lineage_stage, dag_id=self.dag_id,
                             run_id=getattr(task_instance, "run_id", None) or "",
                             results=self.lineage_results(getattr(self, RESULT_ATTR, None)), logger=self.log)

    def engine_context(self, context) -> JobContext:
        """The engine's view of this task: the job, its run, its settings, layout and log."""
        return JobContext(self.job, dag_id=self.dag_id, run_id=context.get("run_id", ""), settings=self.settings,
                          log=self.log, owner=self.job_owner, spec=self.spec, layout=self.layout)

    @cached_property
    def settings(self):
        """airflow.cfg's [training]; for a job whose backend keeps its files in the cluster, with the workspace where
        that backend's pods mount it (every path of the job, on the worker and in the pods, is the cluster's)."""
        settings = training_settings()
        return replace(settings, workspace=self.cluster_workspace) if self.cluster_workspace else settings

    @cached_property
    def cluster_workspace(self) -> str | None:
        """Where the job's files are when its backend keeps them in the cluster (seen from this worker, which has no
        such directory); None: in this worker's [training] workspace."""
        if not self.job:
            return None
        return declaration_for(self.spec.backend).cluster_workspace(self.spec.backend_options())

    @cached_property
    def layout(self):
        return layout_for(self.spec.layout, self.settings.job_root(self.spec.job_name))

    def claim_job(self, context) -> None:
        """Fail fast unless this DAG run owns the job's root (one run per job_name; see operators/state/lease.py)."""
        try:
            self.engine_context(context).claim_job()
        except StageFailed as err:
            raise AirflowFailException(err.reason) from None

    def step_inputs(self, context) -> dict[str, Any]:
        """The keyword arguments of the stage's engine function beside the job (primitives: they travel as JSON to the
        step in the cluster, operators/stages/in_cluster.py): the rendered fields, plus what only the worker has."""
        return {}

    def on_kill(self) -> None:
        """A stage whose work runs in the cluster (operators/stages/in_cluster.py) stops it there."""
        step = getattr(self, "_cluster_step", None)
        if step is not None:
            try:
                step.delete()
            except Exception as err:  # on_kill must not raise; say what may be left behind
                self.log.error("Could not stop the step of %s in the cluster: %s", self.task_id, err)

    @cached_property
    def storage(self):
        # lazy: storage client (botocore, awscrt, obstore), not at DAG parse
        from operators.storage.hook import ObjectStorageHook

        return ObjectStorageHook(connections=self.spec.connections, settings=self.settings)

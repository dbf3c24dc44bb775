"""What every stage after validation shares: the validated spec (from XCom), its job root and its hooks."""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from functools import cached_property
from typing import Any, Mapping

from airflow.sdk import BaseOperator
from operators.airflow_compat import AirflowFailException
from training_runtime.layouts import layout_for

from operators.fs.safe_tar import BadArchiveError
from operators.jobspec.errors import SpecError
from operators.jobspec.model import JobSpec
from operators.jobspec.ownership import OWNER_KEY, dag_owner, load_ownership
from operators.launch.registry import launcher_for
from operators.settings import training_settings
from operators.stages.failure_reasons import records_failure_reason
from operators.stages.in_cluster import in_step_pod
from operators.state.job_state import ensure_state_dir
from operators.state.lease import JobNameTaken, claim
from operators.state.owner_records import OwnerRecord, check_spec_locations
from operators.storage.errors import StorageError


def storage_failures_fail_fast(execute):
    """Decorates a transfer stage's execute: storage errors no retry can fix (access denied, no such bucket or
    object, a connection without an endpoint; StorageError.permanent) and refused archives fail the task at once,
    without its retries; everything else (interrupted connections, throttling, a transfer cut short) is raised as
    it is, for the task's retries (operators/pipelines/template.py)."""

    @functools.wraps(execute)
    def wrapper(self, context):
        try:
            return execute(self, context)
        except StorageError as err:
            if err.permanent:
                raise AirflowFailException(str(err)) from None
            raise
        except BadArchiveError as err:
            raise AirflowFailException(str(err)) from None

    return wrapper


class JobStageOperator(BaseOperator):
    """A stage of one training job. `job` is the validated spec dict, usually the validate task's XComArg."""

    template_fields = ("job",)
    ui_color = "#e8f4fd"

    def __init_subclass__(cls, **kwargs):
        """Every stage's failure says why in the training-jobs view (operators/stages/failure_reasons.py)."""
        super().__init_subclass__(**kwargs)
        for name in ("execute", "execute_complete"):
            if name in vars(cls):
                setattr(cls, name, records_failure_reason(vars(cls)[name]))

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

    def check_owner_records(self, context) -> None:
        """validate_spec's check of the spec's locations against the platform's owner records, where validate_spec
        could not make it: in a data-plane step in the cluster, which holds the storage identity."""
        spec = self.spec
        record = OwnerRecord(self.job_owner, self.dag_id, spec.base_job_name or "", "job", spec.job_name,
                             context.get("run_id", ""))
        try:
            check_spec_locations(self.storage, load_ownership(), self.job, self.job_owner, record, self.log)
        except (SpecError, ValueError) as err:
            raise AirflowFailException(f"invalid job spec: {err}") from None

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
        if not self.job or in_step_pod():  # a step's pod has that workspace in its own settings already
            return None
        where = getattr(launcher_for(self.spec.backend), "cluster_workspace", None)
        return where(self.spec.backend_options()) if where is not None else None

    @cached_property
    def layout(self):
        return layout_for(self.spec.layout, self.settings.job_root(self.spec.job_name))

    def claim_job(self, context) -> None:
        """Fail fast unless this DAG run owns the job's root (one run per job_name; see operators/state/lease.py)."""
        os.makedirs(self.layout.root, exist_ok=True)
        try:
            state = ensure_state_dir(self.settings.workspace, self.spec.job_name)
            if claim(state, self.spec.job_name, self.dag_id, context["run_id"]):
                self.log.info("Job %s is run %s's", self.spec.job_name, context["run_id"])
        except JobNameTaken as err:
            raise AirflowFailException(str(err)) from None  # retrying cannot help while the other run holds it

    def step_fields(self, context) -> dict[str, Any]:
        """The constructor arguments its step in the cluster rebuilds this stage from (operators/stages/in_cluster.py):
        the rendered template fields, plus what a stage adds that only the worker has."""
        return {name: getattr(self, name) for name in self.template_fields}

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

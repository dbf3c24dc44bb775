"""What every stage's engine function is given: the job and where it runs (JobContext), and the two checks several
stages share (claiming the job root for the run, the spec's locations against the owner records)."""

from __future__ import annotations

import logging
import os
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping

from training_runtime.layouts import layout_for

from operators.engine.errors import StageFailed
from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import OWNER_KEY, dag_owner, load_ownership
from operators.state.job_state import ensure_state_dir
from operators.state.lease import JobNameTaken, claim
from operators.state.owner_records import OwnerRecord, check_spec_locations

if TYPE_CHECKING:
    from operators.jobspec.model import JobSpec
    from operators.jobspec.validated import ValidatedSpec


class JobContext:
    """One stage of one job: `job` the validated spec dict (what validate_spec returned), `dag_id`/`run_id` the run,
    `settings` the [training] settings whose workspace holds the job's files (the cluster's for a cluster data plane),
    `log` where the stage says what it did. `storage` (an ObjectStorageHook) and `layout` are built on first use unless
    given; `owner` defaults to what validate_spec recorded (else the DAG's). `spec`: the JobSpec (default: built from
    `job`), or a data-plane step's ValidatedSpec, which reads the worker's validated dict without pydantic."""

    def __init__(self, job: Mapping[str, Any], *, dag_id: str, run_id: str, settings: Any,
                 log: logging.Logger | logging.LoggerAdapter | None = None, owner: str | None = None,
                 storage: Any = None, layout: Any = None, spec: JobSpec | ValidatedSpec | None = None):
        self.job = dict(job)
        if spec is None:
            from operators.jobspec.model import JobSpec  # lazy: pydantic; a data-plane step gives a ValidatedSpec

            spec = JobSpec.from_dict(self.job)
        self.spec = spec
        self.dag_id = dag_id
        self.run_id = run_id
        self.settings = settings
        self.log = log if log is not None else logging.getLogger("operators.engine")
        self.owner = owner or self.job.get(OWNER_KEY) or dag_owner(dag_id)
        if storage is not None:
            self.storage = storage
        if layout is not None:
            self.layout = layout

    @cached_property
    def layout(self):
        return layout_for(self.spec.layout, self.settings.job_root(self.spec.job_name))

    @cached_property
    def storage(self):
        # lazy: the storage clients (botocore, awscrt, obstore), for the stages that move bytes only
        from operators.storage.hook import ObjectStorageHook

        return ObjectStorageHook(connections=self.spec.connections, settings=self.settings)

    def owner_record(self) -> OwnerRecord:
        spec = self.spec
        return OwnerRecord(self.owner, self.dag_id, spec.base_job_name or "", "job", spec.job_name, self.run_id)

    def claim_job(self) -> None:
        """Fail fast unless this run owns the job's root (one run per job_name; see operators/state/lease.py)."""
        os.makedirs(self.layout.root, exist_ok=True)
        try:
            state = ensure_state_dir(self.settings.workspace, self.spec.job_name)
            if claim(state, self.spec.job_name, self.dag_id, self.run_id):
                self.log.info("Job %s is run %s's", self.spec.job_name, self.run_id)
        except JobNameTaken as err:
            raise StageFailed(str(err)) from None  # retrying cannot help while the other run holds it

    def check_owner_records(self) -> None:
        """validate_spec's check of the spec's locations against the platform's owner records, where validate_spec
        could not make it: in a data-plane step in the cluster, which holds the storage identity."""
        try:
            check_spec_locations(self.storage, load_ownership(), self.job, self.owner, self.owner_record(), self.log)
        except (SpecError, ValueError) as err:
            raise StageFailed(f"invalid job spec: {err}") from None

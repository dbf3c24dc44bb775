from __future__ import annotations

import hashlib
from typing import Any, Mapping

from airflow.sdk import BaseOperator
from operators.airflow_compat import AirflowFailException

from operators.jobspec.entry_point import check_entry_point
from operators.jobspec.local_paths import airflow_private_paths, check_private_paths
from operators.jobspec.model import SpecError, base_name_from, job_name_from
from operators.jobspec.ownership import (
    OWNER_KEY,
    check_reserved_names,
    dag_owner,
    load_ownership,
    read_locations,
    run_owner,
    write_locations,
)
from operators.jobspec.secret_policy import load_policy, references
from operators.launch.checks import check_world
from operators.launch.registry import declaration_for
from operators.launch.spec import validate_spec
from operators.lineage.reproduce import check_reproduced_run
from operators.settings import training_settings
from operators.state.owner_records import OwnerRecord, check_spec_locations
from operators.storage.errors import StorageError
from operators.stages.failure_reasons import records_failure_reason


class ValidateSpecOperator(BaseOperator):
    """First stage: check the job spec and hand the validated spec (a dict) to every later stage through XCom.

    `spec` is the spec to run (a config file's, or None to take the run's Params/--conf); `spec_defaults` fill what it
    leaves out. A bad spec fails here with one line naming the field, before anything is downloaded or started.

    The run's owner (operators/jobspec/ownership.py) is its triggering user, or its DAG when nobody triggered it or when
    `dag_owned` (a retraining DAG: its config fixes the lineage); it travels with the validated spec as `owner`, and
    every location the spec names is checked against it here: the admin's output roots, and the platform's owner
    records beside the outputs (operators/state/owner_records.py; a backend whose data plane runs in the cluster has
    them checked by its first step instead, where the storage identity is).
    """

    template_fields = ("spec",)
    ui_color = "#fdf6e3"

    def __init__(self, *, spec: Mapping[str, Any] | None = None, spec_defaults: Mapping[str, Any] | None = None,
                 dag_owned: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        self.spec_defaults = dict(spec_defaults or {})
        self.dag_owned = dag_owned

    @records_failure_reason
    def execute(self, context) -> dict[str, Any]:
        raw = dict(self.spec_defaults)
        given = self.spec if self.spec is not None else context["params"]
        raw.update({k: v for k, v in dict(given).items() if v is not None})
        settings = training_settings()
        try:
            policy = load_policy()
            ownership = load_ownership()
        except ValueError as err:  # the admin's setting is malformed: no retry can help
            raise AirflowFailException(str(err)) from None
        user = getattr(context["dag_run"], "triggering_user_name", None)
        owner = dag_owner(self.dag_id) if self.dag_owned else run_owner(user, self.dag_id)
        base = raw.get("base_job_name") or base_name_from(self.dag_id)
        run_id = context["run_id"]
        when = context["dag_run"].run_after or context.get("logical_date")
        suffix = f"{when:%Y%m%d-%H%M%S}-{hashlib.sha256(run_id.encode()).hexdigest()[:4]}"
        try:
            if OWNER_KEY in raw:
                raise SpecError(OWNER_KEY, "is set by the platform (the user who triggered the run, or its DAG); "
                                           "remove it")
            spec = validate_spec(
                raw,
                default_job_name=job_name_from(base, suffix),
                default_base_job_name=base,
                default_backend=settings.default_backend,
                default_layout=settings.default_layout,
            )
            # Before check_world, which reads every referenced secret and connection: a reference the admin does not
            # allow for this DAG is refused unread.
            refs = references(spec.to_dict())
            policy.check(self.dag_id, refs)
            # the SDK's uploaded code is the triggering user's own (operators/staging/sdk_uploads.py)
            areas = settings.platform_areas_for(getattr(context["dag_run"], "triggering_user_name", None))
            check_world(spec, settings.local_roots, areas)
            check_private_paths(spec.to_dict(), airflow_private_paths(settings.workspace), areas)
            check_entry_point(spec)  # after the path checks: only an allowed path is looked into
            validated = spec.to_dict()
            locations = [*write_locations(validated), *read_locations(validated)]
            check_reserved_names(locations)
            ownership.check_roots(owner, locations)
            # a reproduction: the reproduced run's kept lineage record is the new run's owner's, and its pins match
            check_reproduced_run(spec, settings.workspace, owner, ownership)
            if not self._data_plane_in_cluster(spec):
                self._check_owner_records(spec, validated, owner, ownership, context)
        except SpecError as err:
            for line in getattr(err, "details", ()):  # every problem pydantic found, for the log only
                self.log.info("spec problem: %s", line)
            # A spec or configuration error: retrying cannot help, and nothing has been staged.
            raise AirflowFailException(f"invalid job spec: {err}") from None
        if refs:
            self.log.info("Secret references allowed for DAG %s (run triggered by %s): %s", self.dag_id,
                          getattr(context["dag_run"], "triggering_user_name", None) or "no user",
                          ", ".join(f"{ref.field} -> {ref.label}" for ref in refs))
        for section in spec.ignored_sections():
            self.log.warning("The spec's %r options are ignored: the job runs on the %s backend", section,
                             spec.backend)
        self.log.info("Job %s of %s: %s backend, %s layout, %d host(s), artifacts to %s", spec.job_name, owner,
                      spec.backend, spec.layout, spec.instance_count, spec.job_output_uri)
        return {**validated, OWNER_KEY: owner}

    @staticmethod
    def _data_plane_in_cluster(spec) -> bool:
        """Whether the job's backend moves its bytes in the cluster, where the storage identity is (not here)."""
        return declaration_for(spec.backend).cluster_workspace(spec.backend_options()) is not None

    def _check_owner_records(self, spec, validated, owner, ownership, context) -> None:
        # lazy: storage client (botocore, obstore), not at DAG parse
        from operators.storage.hook import ObjectStorageHook

        record = OwnerRecord(owner, self.dag_id, spec.base_job_name or "", "job", spec.job_name, context["run_id"])
        try:
            check_spec_locations(ObjectStorageHook(connections=spec.connections), ownership, validated, owner,
                                 record, self.log)
        except StorageError as err:
            if err.permanent:
                raise AirflowFailException(f"cannot check whose the job's locations are: {err}") from None
            raise

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from operators.jobspec.entry_point import check_entry_point
from operators.jobspec.local_paths import airflow_private_paths, check_private_paths
from operators.jobspec.model import SpecError, base_name_from, job_name_from
from operators.jobspec.secret_policy import load_policy, references
from operators.launch.checks import check_world
from operators.launch.spec import validate_spec
from operators.settings import training_settings
from operators.stages.failure_reasons import records_failure_reason


class ValidateSpecOperator(BaseOperator):
    """First stage: check the job spec and hand the validated spec (a dict) to every later stage through XCom.

    `spec` is the spec to run (a config file's, or None to take the run's Params/--conf); `spec_defaults` fill what it
    leaves out. A bad spec fails here with one line naming the field, before anything is downloaded or started.
    """

    template_fields = ("spec",)
    ui_color = "#fdf6e3"

    def __init__(self, *, spec: Mapping[str, Any] | None = None, spec_defaults: Mapping[str, Any] | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        self.spec_defaults = dict(spec_defaults or {})

    @records_failure_reason
    def execute(self, context) -> dict[str, Any]:
        raw = dict(self.spec_defaults)
        given = self.spec if self.spec is not None else context["params"]
        raw.update({k: v for k, v in dict(given).items() if v is not None})
        settings = training_settings()
        try:
            policy = load_policy()
        except ValueError as err:  # the admin's setting is malformed: no retry can help
            raise AirflowFailException(str(err)) from None
        base = raw.get("base_job_name") or base_name_from(self.dag_id)
        run_id = context["run_id"]
        when = context["dag_run"].run_after or context.get("logical_date")
        suffix = f"{when:%Y%m%d-%H%M%S}-{hashlib.sha256(run_id.encode()).hexdigest()[:4]}"
        try:
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
        self.log.info("Job %s: %s backend, %s layout, %d host(s), artifacts to %s", spec.job_name, spec.backend,
                      spec.layout, spec.instance_count, spec.job_output_uri)
        return spec.to_dict()

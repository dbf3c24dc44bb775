from __future__ import annotations

from training_runtime.layouts import create_directories

from operators.stages.base import JobStageOperator, storage_failures_fail_fast
from operators.stages.in_cluster import in_step_pod, runs_in_cluster


class StageCodeOperator(JobStageOperator):
    """Stage the training code (prefix, .tar.gz object, local dir or .tar.gz) into the job root's code directory."""

    ui_color = "#e3f2e1"

    @runs_in_cluster
    @storage_failures_fail_fast
    def execute(self, context) -> dict:
        # lazy: staging -> storage client (botocore, obstore), not at DAG parse
        from operators.staging.code import stage_code

        if in_step_pod():  # validate_spec, on the worker, had no storage identity for the owner records
            self.check_owner_records(context)
        self.claim_job(context)
        create_directories(self.layout, channels=list(self.spec.inputs))
        stats = stage_code(self.storage, self.spec.source_dir, self.layout.code_dir)
        self.log.info("Code from %s staged into %s: %d files, %d bytes", self.spec.source_dir, self.layout.code_dir,
                      stats.files, stats.bytes)
        return {"code_dir": self.layout.code_dir, "files": stats.files, "bytes": stats.bytes}

from __future__ import annotations

from operators.stages.base import JobStageOperator, engine_errors
from operators.stages.in_cluster import runs_in_cluster


class StageCodeOperator(JobStageOperator):
    """Stage the training code (prefix, .tar.gz object, local dir or .tar.gz) into the job root's code directory
    (operators/engine/transfers.py stage_code)."""

    ui_color = "#e3f2e1"
    engine_stage = "stage_code"
    lineage_stage, lineage_result = "stage_code", "stage_code"

    @runs_in_cluster
    @engine_errors
    def execute(self, context) -> dict:
        # lazy: the engine's staging -> storage clients (botocore, obstore), not at DAG parse
        from operators.engine.transfers import stage_code

        return stage_code(self.engine_context(context)).to_dict()

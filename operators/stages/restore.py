from __future__ import annotations

from operators.stages.base import JobStageOperator, engine_errors
from operators.stages.in_cluster import runs_in_cluster


class RestoreOperator(JobStageOperator):
    """Incremental training: checkpoint_path contents into the checkpoint dir; the resume_from model into channel `model`
    (operators/engine/transfers.py restore).

    resume_from "latest" is the newest model.tar.gz of the same base_job_name under output_path that the platform
    recorded as this run's owner's (operators/state/owner_records.py latest_model): another owner's run, whatever its
    name, is never resumed from.

    The job root may hold what an earlier attempt's script left: links in the checkpoint dir are removed (with a
    warning) and the directories written into are checked to be real ones, so nothing is written through a link.
    """

    ui_color = "#fff3e0"
    engine_stage = "restore"
    lineage_stage, lineage_result = "restore", "restore"

    @runs_in_cluster
    @engine_errors
    def execute(self, context) -> dict:
        # lazy: the engine's transfers -> storage clients (botocore, obstore), not at DAG parse
        from operators.engine.transfers import restore

        return restore(self.engine_context(context)).to_dict()

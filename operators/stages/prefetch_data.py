from __future__ import annotations

from operators.stages.base import JobStageOperator, engine_errors
from operators.stages.in_cluster import runs_in_cluster


class PrefetchDataOperator(JobStageOperator):
    """Prefetch each input channel into the shared cache (once), then make input/data/<channel> a view of it
    (operators/engine/transfers.py prefetch_data).

    Locally the view is a link into the cache; backends that mount cache entries (pods, containers) get an empty
    mount point there instead.
    """

    ui_color = "#e3f2e1"
    engine_stage = "prefetch_data"
    lineage_stage, lineage_result = "prefetch_data", "prefetch"

    @runs_in_cluster
    @engine_errors
    def execute(self, context) -> dict:
        # lazy: the engine's data cache -> storage clients (botocore, obstore), not at DAG parse
        from operators.engine.transfers import prefetch_data

        return prefetch_data(self.engine_context(context)).to_dict()

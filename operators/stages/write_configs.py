from __future__ import annotations

from typing import Any

from operators.stages.base import JobStageOperator, engine_errors
from operators.stages.in_cluster import runs_in_cluster


class WriteConfigsOperator(JobStageOperator):
    """Write input/config/: hyperparameters.json, resourceconfig.json, inputdataconfig.json, trainingjobconfig.json.

    Also clears what an earlier attempt of the same job left in output/ (success, failure) so its result can't be
    mistaken for this one's (operators/engine/transfers.py write_configs; the files are operators/launch/job_configs.py's,
    shared with the SDK's local mode).
    """

    template_fields = ("job", "channels")
    engine_stage = "write_configs"

    def __init__(self, *, channels: dict | Any = None, **kwargs):
        super().__init__(**kwargs)
        self.channels = channels

    def step_inputs(self, context) -> dict[str, Any]:
        return {"channels": self.channels}

    @runs_in_cluster
    @engine_errors
    def execute(self, context) -> dict:
        # lazy: the engine's functions, only when a stage runs
        from operators.engine.transfers import write_configs

        return write_configs(self.engine_context(context), self.channels).to_dict()

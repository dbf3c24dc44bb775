from __future__ import annotations

from typing import Any

from operators.launch.job_configs import write_job_configs
from operators.launch.registry import launcher_for
from operators.stages.base import JobStageOperator
from operators.stages.in_cluster import runs_in_cluster


class WriteConfigsOperator(JobStageOperator):
    """Write input/config/: hyperparameters.json, resourceconfig.json, inputdataconfig.json, trainingjobconfig.json.

    Also clears what an earlier attempt of the same job left in output/ (success, failure) so its result can't be
    mistaken for this one's. The files themselves are operators/launch/job_configs.py's (shared with the SDK's local mode).
    """

    template_fields = ("job", "channels")

    def __init__(self, *, channels: dict | Any = None, **kwargs):
        super().__init__(**kwargs)
        self.channels = channels

    @runs_in_cluster
    def execute(self, context) -> dict:
        layout = self.layout
        hosts = write_job_configs(self.spec, layout, launcher_for(self.spec.backend), self.channels)
        self.log.info("Configs written to %s for hosts %s", layout.config_dir, hosts)
        return {"hosts": hosts, "config_dir": layout.config_dir}

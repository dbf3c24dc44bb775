from __future__ import annotations

from typing import Any

from operators.stages.base import JobStageOperator


class WriteConfigsOperator(JobStageOperator):
    """Write input/config/: hyperparameters.json, resourceconfig.json, inputdataconfig.json, trainingjobconfig.json.

    Also clears what an earlier attempt of the same job left in output/ (success, failure) so its result can't be
    mistaken for this one's.
    """

    template_fields = ("job", "channels")

    def __init__(self, *, channels: dict | Any = None, **kwargs):
        super().__init__(**kwargs)
        self.channels = channels

    def execute(self, context) -> dict:
        from training_runtime.config import write_config_files

        from operators.hooks.launcher_registry import launcher_for
        from operators.hooks.outcome import clear_outcome_markers

        spec, layout = self.spec, self.layout
        launcher = launcher_for(spec.backend)
        hosts = launcher.hosts(spec.job_name, spec.instance_count)
        channels = dict(self.channels or {})
        channel_names = list(spec.inputs) + (["model"] if spec.resume_from else [])
        resources = dict(spec.resources)
        job_config = {
            "job_name": spec.job_name,
            "layout": spec.layout,
            "entry_point": spec.entry_point,
            "command": spec.command,
            "distribution": spec.distribution,
            "processes_per_host": spec.processes_per_host,
            "master_port": launcher.master_port(),
            "num_gpus": int(resources.get("gpu") or 0),
            "channel_files": {
                name: info["file_name"] for name, info in channels.items() if info["is_file"]
            },
        }
        if "cpu" in resources:
            job_config["num_cpus"] = max(1, int(float(str(resources["cpu"]).rstrip("m")) / (
                1000 if str(resources["cpu"]).endswith("m") else 1)))
        addresses = launcher.host_addresses(spec.job_name, spec.instance_count)
        if addresses:
            job_config["host_addresses"] = addresses
        write_config_files(
            layout,
            hyperparameters=dict(spec.hyperparameters),  # order kept: it is the order of the script's arguments
            resource_config={"current_host": hosts[0], "hosts": hosts, "network_interface_name": "eth0"},
            input_data_config={name: {"TrainingInputMode": "File"} for name in channel_names},
            job_config=job_config,
        )
        clear_outcome_markers(layout.root)
        self.log.info("Configs written to %s for hosts %s", layout.config_dir, hosts)
        return {"hosts": hosts, "config_dir": layout.config_dir}

"""The config files of a job root (input/config/), from a validated spec: the write_configs stage and the SDK's local
mode (training_sdk, which must not import Airflow) both write them here, so both give the runtime the same contract.
No Airflow import."""

from __future__ import annotations

import json
from typing import Any, Mapping

from training_runtime.config import (
    HYPERPARAMETERS_FILE,
    INPUT_DATA_CONFIG_FILE,
    RESOURCE_CONFIG_FILE,
    TRAINING_JOB_CONFIG_FILE,
    encode_hyperparameters,
)

from operators.fs.job_root import JobRoot
from operators.launch.outcome import clear_outcome_markers
from operators.quantities import parse_quantity  # the one quantity parser


def write_job_configs(spec, layout, launcher, channels: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """Write hyperparameters.json, resourceconfig.json, inputdataconfig.json and trainingjobconfig.json for `spec` (a
    JobSpec) into `layout`, and clear what an earlier attempt left in output/ (success, failure); returns the hosts.
    `channels`: channel -> {"is_file": bool, "file_name": str} (what the prefetch stage returns)."""
    hosts = launcher.hosts(spec.job_name, spec.instance_count)
    channels = dict(channels or {})
    channel_names = list(spec.inputs) + (["model"] if spec.resume_from else [])
    resources = spec.resources.model_dump(exclude_none=True)
    job_config = {
        "job_name": spec.job_name,
        "layout": spec.layout,
        "entry_point": spec.entry_point,
        "command": spec.command,
        "distribution": spec.distribution_name,
        "processes_per_host": spec.processes_per_host,
        "master_port": launcher.master_port(),
        "num_gpus": int(resources.get("gpu") or 0),
        "channel_files": {
            name: info["file_name"] for name, info in channels.items() if info["is_file"]
        },
    }
    if "cpu" in resources:
        job_config["num_cpus"] = max(1, int(parse_quantity(resources["cpu"])))
    elastic = spec.elastic_settings()
    if elastic:
        job_config["elastic"] = elastic
    addresses = launcher.host_addresses(spec.job_name, spec.instance_count)
    if addresses:
        job_config["host_addresses"] = addresses
    _write_documents(layout, {
        "hyperparameters": dict(spec.hyperparameters),  # order kept: it is the order of the script's arguments
        "resource": {"current_host": hosts[0], "hosts": hosts, "network_interface_name": "eth0"},
        "input_data": {name: {"TrainingInputMode": "File"} for name in channel_names},
        "job": job_config,
    })
    clear_outcome_markers(layout.root)
    return hosts


def _write_documents(layout, documents: Mapping[str, Any]) -> None:
    """The config files into input/config/ through operators/fs: a retry's job root may hold links the script left
    there (at input/config or at a file name), and the worker must write its files, not through those links."""
    root = JobRoot(layout.root)
    config_dir = root.relative(layout.config_dir)
    contents = {
        HYPERPARAMETERS_FILE: encode_hyperparameters(documents["hyperparameters"]),
        RESOURCE_CONFIG_FILE: documents["resource"],
        INPUT_DATA_CONFIG_FILE: documents["input_data"],
        TRAINING_JOB_CONFIG_FILE: documents["job"],
    }
    for name, document in contents.items():
        root.write_text(f"{config_dir}/{name}", json.dumps(document, indent=2) + "\n")

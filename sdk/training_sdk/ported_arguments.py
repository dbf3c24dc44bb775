"""SageMaker's and PAI's Estimator arguments that are not this platform's spec keys, and what each becomes here.

Submit code written for either SDK should run with its import changed, so every argument their docs' examples write is
  - renamed onto a spec key (max_run -> max_run_seconds, PAI's environments -> environment, labels -> tags, ...),
  - translated (SageMaker's tags list, its distribution objects, PAI's job_type and list command),
  - ignored with one warning, where it asks for something the platform decides elsewhere and the job runs the same
    (the IAM role, a cloud machine type, spot capacity, a framework image version), or
  - refused in one line naming what to use instead, where ignoring it would quietly change what the job does
    (encryption or network isolation asked for, Pipe input, checkpoints outside the layout's directory, packages or
    code that are not in source_dir).
An argument set to None or False asks for nothing and is dropped silently. Anything else unknown goes on to the
DAG's own schema, which names it.
"""

from __future__ import annotations

import warnings
from typing import Any

from training_sdk.errors import IgnoredArgumentWarning, TrainingSdkError

RENAMED = {
    "max_run": "max_run_seconds",            # SageMaker
    "max_run_time": "max_run_seconds",       # PAI
    "checkpoint_s3_uri": "checkpoint_path",  # SageMaker
    "checkpoints_path": "checkpoint_path",   # PAI
    "image_name": "image_uri",               # SageMaker v1
    "environments": "environment",           # PAI
    "labels": "tags",                        # PAI
}

# name -> why it changes nothing here (said in the warning)
IGNORED = {
    "role": "storage is reached with the platform's Airflow connections",
    "sagemaker_session": "the Airflow API is reached through training_sdk.Session",
    "framework_version": "the image is image_uri or the backend's default image",
    "py_version": "the image is image_uri or the backend's default image",
    "volume_size": "the workspace's volume is the admin's",
    "use_spot_instances": "there is no spot capacity here",
    "use_spot_instance": "there is no spot capacity here",
    "spot_spec": "there is no spot capacity here",
    "max_wait": "there is no spot capacity here (max_run_seconds bounds the training)",
    "keep_alive_period_in_seconds": "there are no warm pools here",
    "subnets": "the network is the admin's",
    "security_group_ids": "the network is the admin's",
    "user_vpc_config": "the network is the admin's",
    "container_log_level": "the training's output is streamed as it is",
    "enable_sagemaker_metrics": "metric_definitions are always read",
    "debugger_hook_config": "there is no SageMaker Debugger here",
    "rules": "there is no SageMaker Debugger here",
    "profiler_config": "system metrics are sampled by the runtime (TRAINING_SYSTEM_METRICS_SECONDS)",
    "experiment_config": "every job is tracked (MLflow when the admin set it up)",
    "max_retry_attempts": "the platform retries its own failures",
    "resource_id": "machines are the backend's",
    "resource_type": "machines are the backend's",
}

# Arguments that only turn off a SageMaker feature absent here: nothing to say whatever their value.
SILENT = frozenset({"disable_profiler"})

# name -> what to do instead (said in the error)
REFUSED = {
    "enable_network_isolation": "isolation is the admin's setting here (docs/security.md); remove the argument",
    "encrypt_inter_container_traffic": "the hosts' network is the admin's setting here (docs/security.md); remove "
                                       "the argument",
    "volume_kms_key": "encryption at rest is the volume's or the bucket's setting here; remove the argument",
    "output_kms_key": "encryption at rest is the bucket's setting here (its default encryption); remove the argument",
    "requirements": "list the packages in source_dir/requirements.txt: train installs it before the training",
    "dependencies": "copy them into source_dir: only source_dir is uploaded",
    "git_config": "clone the repository and give its directory as source_dir",
    "tensorboard_output_config": "write TensorBoard files under $SM_OUTPUT_DATA_DIR (packed as output.tar.gz)",
    "model_uri": "use resume_from=<URI of a model.tar.gz> (the script gets it as input channel 'model')",
    "instance_groups": "use instance_count and resources (every host of a job is alike)",
}

_LOCAL_TYPES = ("local", "local_gpu")
_CHECKPOINT_DIRS = ("/opt/ml/checkpoints", "/opt/ml/checkpoints/")
_JOB_TYPES = {"PyTorchJob": "pytorch", "TFJob": "tensorflow", "MPIJob": "mpi"}
# SageMaker's distribution objects -> this spec's word
_DISTRIBUTIONS = {"pytorchddp": "pytorch", "mpi": "mpi", "parameter_server": "tensorflow",
                  "multi_worker_mirrored_strategy": "tensorflow"}


def _refuse(name: str, value: Any, instead: str) -> TrainingSdkError:
    return TrainingSdkError(f"Estimator argument {name}={value!r} has no equivalent here: {instead}")


def _tags(value: Any) -> Any:
    """SageMaker's [{"Key": k, "Value": v}, ...] -> {k: v}; this spec's list of names or object pass as given."""
    if isinstance(value, list) and value and all(isinstance(t, dict) and "Key" in t for t in value):
        return {t["Key"]: t.get("Value", "") for t in value}
    return value


def _distribution(value: Any, kwargs: dict[str, Any]) -> Any:
    """SageMaker's {"pytorchddp" | "mpi" | "parameter_server" | ...: {"enabled": True, ...}} -> pytorch / mpi /
    tensorflow; {"torch_distributed": ...} is this spec's own form and passes as given."""
    if not isinstance(value, dict) or len(value) != 1 or "torch_distributed" in value:
        return value
    (key, options), = value.items()
    if key == "smdistributed":
        raise _refuse("distribution", value, "SageMaker's data/model parallel libraries exist only on SageMaker; use "
                                             "{'torch_distributed': {'enabled': True}} (torchrun)")
    if key not in _DISTRIBUTIONS:
        return value  # the DAG's schema names it
    if not (options or {}).get("enabled", True):
        return None
    if key == "mpi" and (options or {}).get("processes_per_host"):
        kwargs.setdefault("processes_per_host", options["processes_per_host"])
    return _DISTRIBUTIONS[key]


def translate(kwargs: dict[str, Any], *, instance_type: str | None, layout: str | None) -> dict[str, Any]:
    """The Estimator's keyword arguments in this spec's words (a new dict); one IgnoredArgumentWarning names every
    argument that changes nothing here; TrainingSdkError for the first one that cannot be honoured."""
    out = dict(kwargs)
    for old, new in RENAMED.items():
        if old in out:
            value = out.pop(old)
            if out.get(new) is None:
                out[new] = value
    ignored = []
    for name in list(out):
        value = out[name]
        if name in SILENT or (name in IGNORED or name in REFUSED) and value in (None, False):
            del out[name]
        elif name in IGNORED:
            del out[name]
            ignored.append(f"{name} ({IGNORED[name]})")
        elif name in REFUSED:
            raise _refuse(name, value, REFUSED[name])
    if instance_type and instance_type.lower() not in _LOCAL_TYPES and not out.get("resources"):
        ignored.append(f"instance_type={instance_type!r} (no machine is chosen by type here: give "
                       "resources={'cpu': ..., 'memory': ..., 'gpu': ...})")
    checkpoint_dir = out.pop("checkpoint_local_path", None)
    if checkpoint_dir is not None and not (checkpoint_dir in _CHECKPOINT_DIRS and layout in (None, "ti", "sagemaker")):
        raise _refuse("checkpoint_local_path", checkpoint_dir, "checkpoints are synced from the layout's directory "
                                                               "(/opt/ml/checkpoints; $PAI_OUTPUT_CHECKPOINTS in the "
                                                               "pai layout): write them there")
    input_mode = out.pop("input_mode", None)
    if input_mode is not None and str(input_mode) not in ("File", "FastFile"):
        raise _refuse("input_mode", input_mode, "channels are directories of files here (File mode): read them from "
                                                "$SM_CHANNEL_<NAME>")
    channel = out.pop("model_channel_name", None)
    if channel not in (None, "model"):
        raise _refuse("model_channel_name", channel, "the previous model is always input channel 'model' (resume_from)")
    job_type = out.pop("job_type", None)
    if job_type is not None:
        if job_type not in _JOB_TYPES:
            raise _refuse("job_type", job_type, f"give distribution ({', '.join(sorted(set(_JOB_TYPES.values())))}) "
                                                "or leave it out")
        if out.get("distribution") is None:
            out["distribution"] = _JOB_TYPES[job_type]
    if "tags" in out:
        out["tags"] = _tags(out["tags"])
    if "distribution" in out:
        out["distribution"] = _distribution(out["distribution"], out)
    if isinstance(out.get("command"), (list, tuple)):
        out["command"] = " ".join(map(str, out["command"]))  # PAI runs it as `bash -c "<the words joined>"`
    if ignored:
        warnings.warn("ignored here: " + "; ".join(ignored), IgnoredArgumentWarning, stacklevel=3)
    return out


def fit_inputs(inputs: Any) -> dict[str, Any]:
    """fit()'s inputs as channel -> URI: SageMaker's fit("s3://bucket/train/") is its one channel 'training'."""
    if isinstance(inputs, str):
        return {"training": inputs}
    return dict(inputs or {})


def fit_logs(logs: Any) -> bool:
    """fit()'s logs: SageMaker's words "All" / "Rules" stream the log, "None" does not (a non-empty string is true)."""
    return logs != "None" and bool(logs)

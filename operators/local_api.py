"""The platform API of the SDK's local mode (sdk/training_sdk/local.py): the few Airflow-free parts a job on the
user's own machine reuses, so that it behaves as it does on the DAG's local backend. The SDK imports this one module
and nothing else of the platform; what it may use is `__all__`, and every name here imports without Airflow
(tests/operators/test_local_api.py).

    validate_spec, SpecError          the job spec's one validation (same field names in errors)
    layout_for, create_directories    the runtime's job-root layouts (training_runtime.layouts)
    write_job_configs                 the same input/config/ files as the write_configs stage
    JobContext, TrainingSettings      the job engine's view of a job (operators/engine/context.py) and its settings
    write_configs, launch_request     the engine's functions of the write_configs and launch stages (the same files,
                                      the same LaunchRequest as the DAG's)
    job_outputs                       the job's output layout (operators/job_outputs.py)
    LocalLauncherHook, LaunchRequest  the local backend's launcher and what it runs
    MetricCollector, METRICS_STREAM   the same metrics from the log and the metrics file (training_runtime.contract)
    pack_directory                    the same model.tar.gz / output.tar.gz
"""

from __future__ import annotations

from training_runtime.contract import METRICS_STREAM
from training_runtime.layouts import create_directories, layout_for

from operators import job_outputs
from operators.engine.context import JobContext
from operators.engine.launch import launch_request
from operators.engine.transfers import write_configs
from operators.fs.safe_tar import pack_directory
from operators.launch.base import LaunchRequest
from operators.launch.job_configs import write_job_configs
from operators.launch.local.launcher import LocalLauncherHook
from operators.jobspec.model import SpecError
from operators.launch.spec import validate_spec
from operators.settings import TrainingSettings
from operators.tracking.metrics import MetricCollector

__all__ = [
    "METRICS_STREAM",
    "JobContext",
    "LaunchRequest",
    "LocalLauncherHook",
    "MetricCollector",
    "SpecError",
    "TrainingSettings",
    "create_directories",
    "job_outputs",
    "launch_request",
    "layout_for",
    "pack_directory",
    "validate_spec",
    "write_configs",
    "write_job_configs",
]

"""The platform API of the SDK's local mode (sdk/training_sdk/local.py): the few Airflow-free parts a job on the
user's own machine reuses, so that it behaves as it does on the DAG's local backend. The SDK imports this one module
and nothing else of the platform; what it may use is `__all__`, and every name here imports without Airflow
(tests/operators/test_local_api.py).

    validate_spec, SpecError          the job spec's one validation (same field names in errors)
    layout_for                        the runtime's job-root layouts (training_runtime.layouts)
    JobContext, TrainingSettings      the job engine's view of a job (operators/engine/context.py) and its settings
    stage_code, prefetch_data,        the engine's stage functions, the DAG's stages' own work (operators/engine/):
    write_configs, restore,           the same code tree, cache and views, input/config/ files, restored checkpoints,
    launch_request, launch_summary,   LaunchRequest and summary, artifacts and lineage record as a DAG run's
    upload_artifacts
    StageFailed, StageSkipped         how an engine function says a stage could not do its work (one line: .reason)
    JobRootHere                       the job root as the launch stage sees it on the worker: metrics.json, the
                                      checkpoint sync, a failure's reason (operators/engine/job_root_access.py)
    StorageError                      a store's one-line error (checkpoint_path unreachable)
    CODE_MAX_BYTES                    the most code stage_code extracts (operators/fs/safe_tar.py)
    job_outputs                       the job's output layout (operators/job_outputs.py)
    LocalLauncherHook, LaunchRequest  the local backend's launcher and what it runs
    MetricCollector                   the same metrics from the log and the metrics file
"""

from __future__ import annotations

from training_runtime.layouts import layout_for

from operators import job_outputs
from operators.engine.context import JobContext
from operators.engine.errors import StageFailed, StageSkipped
from operators.engine.job_root_access import JobRootHere
from operators.engine.launch import launch_request, launch_summary
from operators.engine.transfers import prefetch_data, restore, stage_code, write_configs
from operators.engine.upload import upload_artifacts
from operators.fs.safe_tar import DEFAULT_MAX_BYTES as CODE_MAX_BYTES
from operators.launch.base import LaunchRequest
from operators.launch.local.launcher import LocalLauncherHook
from operators.jobspec.model import SpecError
from operators.launch.spec import validate_spec
from operators.settings import TrainingSettings
from operators.storage.errors import StorageError
from operators.tracking.metrics import MetricCollector

__all__ = [
    "CODE_MAX_BYTES",
    "JobContext",
    "JobRootHere",
    "LaunchRequest",
    "LocalLauncherHook",
    "MetricCollector",
    "SpecError",
    "StageFailed",
    "StageSkipped",
    "StorageError",
    "TrainingSettings",
    "job_outputs",
    "launch_request",
    "launch_summary",
    "layout_for",
    "prefetch_data",
    "restore",
    "stage_code",
    "upload_artifacts",
    "validate_spec",
    "write_configs",
]

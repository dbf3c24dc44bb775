"""One thin operator per pipeline stage; the packages they call (storage, cache, staging, launch) do the I/O."""

from operators.stages.launch_training import LaunchTrainingOperator
from operators.stages.prefetch_data import PrefetchDataOperator
from operators.stages.publish_model import PublishModelOperator
from operators.stages.restore import RestoreOperator
from operators.stages.stage_code import StageCodeOperator
from operators.stages.upload_artifacts import UploadArtifactsOperator
from operators.stages.validate_spec import ValidateSpecOperator
from operators.stages.write_configs import WriteConfigsOperator

__all__ = [
    "ValidateSpecOperator",
    "StageCodeOperator",
    "PrefetchDataOperator",
    "WriteConfigsOperator",
    "RestoreOperator",
    "LaunchTrainingOperator",
    "UploadArtifactsOperator",
    "PublishModelOperator",
]

"""The reusable DAG template: the chain of stage operators for one training job.

    with DAG("my_training", params=training_job_params(), schedule=None) as dag:
        tasks = training_job_tasks()                    # the spec comes from the run's Params / --conf
    with DAG("nightly", schedule="@daily") as dag:
        tasks = training_job_tasks(spec=load_job_config("dags/configs/churn.yaml"))

validate -> stage_code -> prefetch_data -> write_configs -> restore -> launch_training -> upload_artifacts -> publish_model
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from airflow.sdk import Asset

from operators.airflow_compat import RETRY_BACKOFF_DOUBLING
from operators.stages import (
    LaunchTrainingOperator,
    PrefetchDataOperator,
    PublishModelOperator,
    RestoreOperator,
    StageCodeOperator,
    UploadArtifactsOperator,
    ValidateSpecOperator,
    WriteConfigsOperator,
)


# The stages that move bytes to and from object storage ride out what the per-request attempts could not (an
# outage of a minute, a store shedding load for longer): retried after 10 s, 20 s, 40 s. Errors no retry can fix
# (access denied, no such bucket, a refused archive) fail at once instead (JobStageOperator.storage_failures).
TRANSFER_RETRIES = 3
TRANSFER_RETRY_DELAY = timedelta(seconds=10)


@dataclass(frozen=True)
class TrainingTasks:
    validate: ValidateSpecOperator
    stage_code: StageCodeOperator
    prefetch_data: PrefetchDataOperator
    write_configs: WriteConfigsOperator
    restore: RestoreOperator
    launch: LaunchTrainingOperator
    upload: UploadArtifactsOperator
    publish: PublishModelOperator

    @property
    def first(self):
        return self.validate

    @property
    def last(self):
        return self.publish


def model_asset_for(dag_id: str):
    """The Asset a training DAG's models are published to (event extra carries model_uri)."""
    return Asset(name=f"{dag_id}.model", uri=f"x-model://{dag_id}")


def training_job_tasks(
    *,
    spec: Mapping[str, Any] | None = None,
    spec_defaults: Mapping[str, Any] | None = None,
    model_asset=None,
    task_id_prefix: str = "",
    deferrable: bool | None = None,
    launch_retries: int = 2,
    transfer_retries: int = TRANSFER_RETRIES,
    early_stopping=None,
    launch_kwargs: Mapping[str, Any] | None = None,
    dag_owned: bool = False,
) -> TrainingTasks:
    """Create the stage chain in the current DAG (call inside `with DAG(...)`); returns its tasks for wiring.

    `early_stopping` (a primitive dict or an XComArg of one) and `launch_kwargs` (extra BaseOperator arguments of the
    launch task, e.g. pool, max_active_tis_per_dagrun) exist for hyperparameter search trials (operators/pipelines/search.py).
    `dag_owned`: every run is its DAG's, whoever triggered it (a retraining DAG's lineage: operators/jobspec/ownership.py).
    """
    p = task_id_prefix
    transfers = {"retries": transfer_retries, "retry_delay": TRANSFER_RETRY_DELAY, "retry_exponential_backoff": RETRY_BACKOFF_DOUBLING,
                 "max_retry_delay": timedelta(minutes=5)}
    validate = ValidateSpecOperator(task_id=f"{p}validate_spec", spec=spec, spec_defaults=spec_defaults,
                                    dag_owned=dag_owned)
    job = validate.output
    stage_code = StageCodeOperator(task_id=f"{p}stage_code", job=job, **transfers)
    prefetch = PrefetchDataOperator(task_id=f"{p}prefetch_data", job=job, **transfers)
    configs = WriteConfigsOperator(task_id=f"{p}write_configs", job=job, channels=prefetch.output)
    restore = RestoreOperator(task_id=f"{p}restore", job=job, **transfers)
    launch = LaunchTrainingOperator(task_id=f"{p}launch_training", job=job, channels=prefetch.output,
                                    deferrable=deferrable, retries=launch_retries, early_stopping=early_stopping,
                                    **dict(launch_kwargs or {}))
    # The run's lineage record is built from the earlier stages' results (operators/engine/lineage.py).
    stage_results = {"stage_code": stage_code.output, "prefetch": prefetch.output, "write_configs": configs.output,
                     "restore": restore.output, "launch": launch.output}
    upload = UploadArtifactsOperator(task_id=f"{p}upload_artifacts", job=job, metrics_from=launch.task_id,
                                     stage_results=stage_results, trigger_rule="all_done", **transfers)
    publish = PublishModelOperator(task_id=f"{p}publish_model", upload=upload.output, model_asset=model_asset,
                                   job=job)
    validate >> stage_code >> prefetch >> configs >> restore >> launch >> upload >> publish
    launch >> publish  # a failed training fails the run (publish becomes upstream_failed)
    return TrainingTasks(validate, stage_code, prefetch, configs, restore, launch, upload, publish)

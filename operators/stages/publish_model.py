from __future__ import annotations

from operators.jobspec.model import JobSpec
from operators.stages.links import stage_links
from operators.tracking.mlflow import configured_uri, experiment_name, record_model

from typing import Any

from airflow.sdk import BaseOperator
from operators.airflow_compat import AirflowFailException


class PublishModelOperator(BaseOperator):
    """Publish the trained model: its URI is this task's XCom (the pipeline's result) and an event of the model Asset."""

    template_fields = ("upload", "job")
    operator_extra_links = stage_links()
    ui_color = "#c8e6c9"

    def __init__(self, *, upload: dict | Any, model_asset=None, job: dict | Any = None, **kwargs):
        if model_asset is not None:
            kwargs.setdefault("outlets", [model_asset])
        super().__init__(**kwargs)
        self.upload = upload
        self.model_asset = model_asset
        self.job = job  # the validated spec: names the job's MLflow run (when [training] mlflow_tracking_uri is set)

    def execute(self, context) -> str:
        model_uri = (self.upload or {}).get("model_uri")
        if not model_uri:
            raise AirflowFailException("no model to publish: training did not succeed (see the launch task's log)")
        if self.model_asset is not None:
            context["outlet_events"][self.model_asset].extra = {
                "model_uri": model_uri,
                "artifacts": self.upload.get("artifacts", {}),
                "run_id": context["run_id"],
            }
        self.log.info("Model published: %s", model_uri)
        self._record_in_mlflow(model_uri, context["run_id"])
        return model_uri

    def _record_in_mlflow(self, model_uri: str, run_id: str) -> None:
        uri = configured_uri()
        if uri and self.job:
            spec = JobSpec.from_dict(self.job)
            record_model(uri, experiment=experiment_name(spec.base_job_name, self.dag_id), job_name=spec.job_name,
                         model_uri=model_uri, run_id=run_id, logger=self.log)

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from operators.airflow_compat import AirflowFailException

from operators.jobspec.model import JobSpec
from operators.stages.links import stage_links
from operators.tracking.mlflow import configured_uri, experiment_name, record_lineage, record_model


class PublishModelOperator(BaseOperator):
    """Publish the trained model: its URI is this task's XCom (the pipeline's result) and an event of the model Asset.
    With tracking on, the job's MLflow run records the model and the run's lineage (the record the upload published,
    operators/lineage/record.py); the provider's OpenLineage hook reports the model with that lineage."""

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
            experiment = experiment_name(spec.base_job_name, self.dag_id)
            recorded = record_model(uri, experiment=experiment, job_name=spec.job_name, model_uri=model_uri,
                                    run_id=run_id, logger=self.log)
            # a server that refused the model has said so in one line: its lineage is not tried after it
            if recorded and self.published_lineage is not None:
                # lazy: the record's JSON form, only with tracking on
                from operators.lineage.record import record_dict

                record_lineage(uri, experiment=experiment, job_name=spec.job_name,
                               record=record_dict(self.published_lineage), run_id=run_id, logger=self.log)

    @cached_property
    def published_lineage(self):
        """The run's lineage record as the upload published it (its `lineage_uri`), read once; None, with a warning,
        when there is none or it cannot be read (best effort: the model is published all the same)."""
        lineage_uri = (self.upload or {}).get("lineage_uri")
        if not lineage_uri or not self.job:
            return None
        try:
            # lazy: the storage clients and the record, only when tracking or OpenLineage asks for the lineage
            from operators.lineage.record import LineageRecord
            from operators.settings import training_settings
            from operators.storage.hook import ObjectStorageHook

            storage = ObjectStorageHook(connections=JobSpec.from_dict(self.job).connections,
                                        settings=training_settings())
            return LineageRecord.from_json(storage.read_bytes(lineage_uri))
        except Exception as err:  # noqa: BLE001 - lineage is best effort: it must never fail the publication
            self.log.warning("Could not read the run's lineage record at %s: %s", lineage_uri, err)
            return None

    def get_openlineage_facets_on_complete(self, task_instance):
        """The openlineage provider's hook: the published model with every input it was made from (the record the
        upload published: one small read, shared with MLflow); None when there is none (a warning)."""
        record = self.published_lineage
        if record is None:
            return None
        try:
            # lazy: the provider, only when it asks
            from operators.lineage.openlineage import operator_lineage

            return operator_lineage(record, "publish_model")
        except Exception as err:  # noqa: BLE001 - lineage is best effort: it must never fail the task
            self.log.warning("Could not build the OpenLineage datasets of the published model: %s", err)
            return None

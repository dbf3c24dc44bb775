from __future__ import annotations

from typing import Any, Mapping

from operators.airflow_compat import AirflowSkipException

from operators.stages.base import JobStageOperator, engine_errors
from operators.stages.in_cluster import runs_in_cluster
from operators.stages.launch_training import OUTCOME_KEY
from operators.stages.links import stage_links
from operators.settings import training_settings
from operators.tracking.metrics import METRIC_SERIES_KEY, MetricCollector

# The metrics a step is given travel in its pod's environment (TRAINING_STEP), where one variable holds at most 128 KiB.
STEP_METRICS_BYTES = 64 * 1024


class UploadArtifactsOperator(JobStageOperator):
    """Upload the job's artifacts to `<output_path>/<job_name>/output/`; runs whether training succeeded or not.

    After success: model.tar.gz, output.tar.gz (when output/data is not empty) and metrics.json. After failure: the
    failure reason (and metrics.json) — never a model.tar.gz. Idempotent: a retried or cleared upload finds what was
    already uploaded (a record in the job's state directory plus an existence check) and sends nothing twice
    (operators/engine/upload.py).
    """

    template_fields = ("job", "stage_results")
    operator_extra_links = stage_links()
    ui_color = "#e1bee7"
    engine_stage = "upload_artifacts"
    lineage_stage, lineage_result = "upload_artifacts", "upload"

    def __init__(self, *, metrics_from: str | None = None, metrics: Mapping[str, Any] | None = None,
                 stage_results: Mapping[str, Any] | None = None, **kwargs):
        """`metrics_from`: the launch task, whose XCom METRIC_SERIES_KEY holds the job's metrics where the worker could
        not write them into the job root (the cluster's data plane); the worker hands them to the step as `metrics`,
        which writes them as output/metrics.json before uploading. `stage_results`: the earlier stages' results the
        run's lineage record is built from (operators/engine/lineage.py STAGE_RESULTS -> their XComArgs; a stage that
        did not finish renders as None)."""
        super().__init__(**kwargs)
        self.metrics_from = metrics_from
        self.metrics = metrics
        self.stage_results = stage_results

    def lineage_results(self, result: Any) -> dict[str, Any]:
        """Every earlier stage's result beside the upload's: the upload reports the model and all it was made from."""
        return {**dict(self.stage_results or {}), **super().lineage_results(result)}

    def lineage_inputs(self, context) -> dict[str, Any]:
        """What the lineage record names beside the job (primitives, for the step too): the stages' results (a failed
        launch's summary from its "outcome" XCom) and the run's triggering user."""
        results = dict(self.stage_results or {})
        ti = context.get("ti")
        if results.get("launch") is None and self.metrics_from and ti is not None:
            results["launch"] = ti.xcom_pull(task_ids=self.metrics_from, key=OUTCOME_KEY)
        return {"stage_results": results,
                "triggering_user": getattr(context.get("dag_run"), "triggering_user_name", None) or None}

    def step_inputs(self, context) -> dict[str, Any]:
        fields = {**super().step_inputs(context), **self.lineage_inputs(context)}
        recorded = context["ti"].xcom_pull(task_ids=self.metrics_from, key=METRIC_SERIES_KEY) \
            if self.metrics_from and context.get("ti") is not None else None
        if recorded:
            metrics = MetricCollector()
            metrics.load_series(recorded.get("series") if isinstance(recorded, Mapping) else None)
            fields["metrics"], stride = metrics.to_json_within(STEP_METRICS_BYTES)
            if stride > 1:
                self.log.warning("metrics.json keeps every %dth point of each series: the step's input holds %d KiB",
                                 stride, STEP_METRICS_BYTES // 1024)
        return fields

    def execute(self, context) -> dict:
        result = self._upload(context)
        if self.cluster_workspace is not None and isinstance(result, dict):
            self._keep_cluster_lineage(result)
        return result

    def _keep_cluster_lineage(self, result: dict) -> None:
        """The cluster's data plane kept the record in the cluster's workspace, which this worker, the console and a
        reproduction cannot read: the step's result carries it (written by the platform's code in the step, checked
        against the sha256 of what it published); keep it here, out of the XCom. Never fails the upload (the model is
        published): a record that is not carried, or not that one, is a line in the log."""
        from operators.lineage.record import LINEAGE_CARRIED, LineageError, keep_carried  # lazy: at run time only

        packed, sha256 = result.pop(LINEAGE_CARRIED, None), result.get("lineage_sha256")
        if not packed or not sha256:
            return
        try:
            keep_carried(training_settings().workspace, str(packed), str(sha256), self.spec.job_name)
        except (LineageError, OSError) as err:
            self.log.warning("The lineage record of %s is not kept on this side: %s", self.spec.job_name, err)
        else:
            self.log.info("Lineage record of %s kept on this side (sha256 %s)", self.spec.job_name, sha256)

    @runs_in_cluster
    @engine_errors
    def _upload(self, context) -> dict:
        if not self.job:
            raise AirflowSkipException("the job spec was not validated: nothing to upload")
        # lazy: the engine's upload -> storage clients (botocore, obstore), not at DAG parse
        from operators.engine.upload import upload_artifacts

        return upload_artifacts(self.engine_context(context), metrics=self.metrics,
                                **self.lineage_inputs(context)).to_dict()

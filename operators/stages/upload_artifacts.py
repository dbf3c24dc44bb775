from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from operators.airflow_compat import AirflowFailException, AirflowSkipException

from operators.fs.job_root import JobRoot
from operators.fs.safe_tar import PackTooLargeError
from operators.jobspec.errors import SpecError
from operators.launch.disk_cap import job_disk_cap
from operators.stages.base import JobStageOperator, storage_failures_fail_fast
from operators.stages.in_cluster import runs_in_cluster
from operators.stages.links import stage_links
from operators.state.job_state import ARTIFACTS, UPLOADED, ensure_state_dir, state_path
from operators.state.owner_records import OwnerRecord, record_job_area
from operators.storage.disk_space import PACK_TODO, DiskFullError, disk_full_error, human, is_disk_full
from operators.tracking.metrics import METRIC_SERIES_KEY, MetricCollector

# The metrics a step is given travel in its pod's environment (TRAINING_STEP), where one variable holds at most 128 KiB.
STEP_METRICS_BYTES = 64 * 1024


class UploadArtifactsOperator(JobStageOperator):
    """Upload the job's artifacts to `<output_path>/<job_name>/output/`; runs whether training succeeded or not.

    After success: model.tar.gz, output.tar.gz (when output/data is not empty) and metrics.json. After failure: the
    failure reason (and metrics.json) — never a model.tar.gz. Idempotent: a retried or cleared upload finds what was
    already uploaded (a record in the job's state directory plus an existence check) and sends nothing twice.
    """

    operator_extra_links = stage_links()
    ui_color = "#e1bee7"

    def __init__(self, *, metrics_from: str | None = None, metrics: Mapping[str, Any] | None = None, **kwargs):
        """`metrics_from`: the launch task, whose XCom METRIC_SERIES_KEY holds the job's metrics where the worker could
        not write them into the job root (the cluster's data plane); the worker hands them to the step as `metrics`,
        which writes them as output/metrics.json before uploading."""
        super().__init__(**kwargs)
        self.metrics_from = metrics_from
        self.metrics = metrics

    def step_fields(self, context) -> dict[str, Any]:
        fields = super().step_fields(context)
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

    @runs_in_cluster
    @storage_failures_fail_fast
    def execute(self, context) -> dict:
        try:
            return self._upload(context)
        except DiskFullError:
            raise
        except OSError as err:  # the stage's own small files (records, the artifacts dir) on a full disk
            if not is_disk_full(err):
                raise
            raise disk_full_error("the upload stage's records", self.layout.root, None, PACK_TODO) from None

    def _upload(self, context) -> dict:
        if not self.job:
            raise AirflowSkipException("the job spec was not validated: nothing to upload")
        spec, layout = self.spec, self.layout
        if not os.path.isdir(layout.root):
            raise AirflowSkipException("the job root was never created (an earlier stage failed): nothing to upload")
        self.claim_job(context)  # another run's job root: never upload over its artifacts
        self._release_cache_entries()
        tree = JobRoot(layout.root)  # the tenant's: no link followed, only regular files read (operators/fs)
        has_success, has_failure = tree.is_file("output/success"), tree.is_file("output/failure")
        if not has_success and not has_failure:
            raise AirflowSkipException("training did not run (an earlier stage failed): nothing to upload")
        out = spec.job_output_uri
        # Whose run this is, beside its artifacts and before the first of them: what resume_from "latest" and the
        # checks of other runs' locations go by (operators/state/owner_records.py).
        try:
            record_job_area(self.storage, spec.output_path, spec.job_name, OwnerRecord(
                self.job_owner, self.dag_id, spec.base_job_name or "", "job", spec.job_name, context.get("run_id", "")))
        except SpecError as err:
            raise AirflowFailException(f"nothing uploaded: {err}") from None
        # Packed archives and the upload record are platform state: outside the job root (operators/state/job_state.py).
        artifacts = Path(ensure_state_dir(self.settings.workspace, spec.job_name, ARTIFACTS))
        marker_path = Path(state_path(self.settings.workspace, spec.job_name, UPLOADED))
        marker = json.loads(marker_path.read_text()) if marker_path.is_file() else {}
        succeeded = has_success and not has_failure
        uploaded: dict[str, str] = {}

        def remember(name: str, st: os.stat_result) -> None:
            uri = out + name
            marker[uri] = [st.st_size, st.st_mtime_ns]
            tmp = marker_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(marker))
            os.replace(tmp, marker_path)
            self.log.info("Uploaded %s (%d bytes)", uri, st.st_size)
            uploaded[name] = uri

        def claim_remote(name: str) -> None:
            """A model.tar.gz there that this run did not upload belongs to another run: never overwrite it."""
            uri = out + name
            if uri in marker:
                return
            if name == "model.tar.gz" and self.storage.exists(uri):
                raise AirflowFailException(
                    f"{uri} exists and was not uploaded by this run of job {spec.job_name}: a published model is "
                    f"never overwritten; give this run another job_name")
            marker[uri] = "pending"  # ours from now on, even if we die before the upload is recorded
            tmp = marker_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(marker))
            os.replace(tmp, marker_path)

        def upload_once(local: str, st: os.stat_result, name: str) -> None:
            uri = out + name
            if marker.get(uri) == [st.st_size, st.st_mtime_ns] and self.storage.exists(uri):
                self.log.info("%s already uploaded (retry): skipped", uri)
                uploaded[name] = uri
                return
            claim_remote(name)
            self.storage.upload_file(local, uri)
            remember(name, st)

        def upload_job_file(rel: str, name: str) -> None:
            """A file of the job root, uploaded from the descriptor it was checked on (operators/fs)."""
            with tree.pinned_path(rel) as (path, st):
                upload_once(path, st, name)

        def pack_and_upload_once(src: str, name: str) -> None:
            target = artifacts / name
            success = tree.stat("output/success")
            if target.is_file() and success and target.stat().st_mtime >= success.st_mtime:
                upload_once(str(target), target.stat(), name)  # packed by an earlier attempt of this task
                return
            # Packed and uploaded at once: each part goes up while the next is being compressed.
            claim_remote(name)
            # At most what the job root may hold: sizes can claim more than the disk holds (sparse files are packed
            # whole, zeros read and compressed by the worker), the job's disk cap bounds what packing costs.
            cap = job_disk_cap(spec.resources.disk, self.settings.job_disk_limit)
            try:
                self.storage.upload_packed_directory(src, out + name, str(target), within=layout.root, max_content=cap)
            except PackTooLargeError as err:
                raise AirflowFailException(
                    f"cannot pack {name}: the files of {tree.relative(src)}/ add up to more than the job's disk cap of "
                    f"{human(cap)} ({err}; a sparse file counts at its full size): nothing was published; the model "
                    "must fit in resources.disk") from None
            remember(name, target.stat())

        metrics = "output/metrics.json"
        if self.metrics is not None:  # what the worker matched, written where the shared-volume mode writes it
            recorded = MetricCollector()
            recorded.load_series(self.metrics.get("series"))
            try:
                tree.write_json(metrics, recorded.to_json())
            except OSError as err:  # the job's output/ may refuse it: the model and the reason still go up
                self.log.warning("Could not write %s into the job root: %s", metrics, err)
        if succeeded:
            pack_and_upload_once(layout.model_dir, "model.tar.gz")
            if tree.has_entries(tree.relative(layout.output_data_dir)):
                pack_and_upload_once(layout.output_data_dir, "output.tar.gz")
            if tree.is_file(metrics):
                upload_job_file(metrics, "metrics.json")
            if self.storage.exists(out + "failure"):
                self.storage.delete(out + "failure")  # from an earlier failed attempt of this job
            return {"status": "succeeded", "model_uri": uploaded["model.tar.gz"], "artifacts": uploaded}
        upload_job_file("output/failure", "failure")
        if tree.is_file(metrics):
            upload_job_file(metrics, "metrics.json")
        self.log.warning("Training did not succeed: the reason is at %s; no model was uploaded", uploaded["failure"])
        return {"status": "failed", "model_uri": None, "artifacts": uploaded,
                "failure": tree.read_text("output/failure", 64 * 1024, tail=True)[-2000:]}

    def _release_cache_entries(self) -> None:
        """Training is over: the job's channels no longer pin their cache entries against eviction."""
        # lazy: data cache -> storage client (botocore, obstore), not at DAG parse
        from operators.cache.data_cache import DataCacheHook

        DataCacheHook(self.settings.cache_dir, self.storage, max_bytes=self.settings.cache_max_bytes).release(
            self.spec.job_name)

"""The upload stage's engine function: the job's artifacts to `<output_path>/<job_name>/output/` (operators/job_outputs.py),
whether training succeeded or not.

After success: model.tar.gz, output.tar.gz (when output/data is not empty) and metrics.json. After failure: the failure
reason (and metrics.json), never a model.tar.gz. Idempotent: a retried or cleared upload finds what was already
uploaded (a record in the job's state directory plus an existence check) and sends nothing twice. Either way, the run's
lineage record goes last (operators/engine/lineage.py): lineage.json beside the model."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from operators.engine.context import JobContext
from operators.engine.errors import StageFailed, StageSkipped, failing_fast
from operators.engine.lineage import publish_lineage
from operators.engine.results import UploadedArtifacts
from operators.fs.job_root import JobRoot
from operators.fs.safe_tar import PackTooLargeError
from operators.job_outputs import FAILURE, METRICS, MODEL, OUTPUT_ARCHIVE, OUTPUT_DIR
from operators.jobspec.errors import SpecError
from operators.launch.disk_cap import job_disk_cap
from operators.state.job_state import ARTIFACTS, UPLOADED, ensure_state_dir, state_path
from operators.state.owner_records import record_job_area
from operators.storage.disk_space import PACK_TODO, DiskFullError, disk_full_error, human, is_disk_full
from operators.tracking.metrics import MetricCollector

METRICS_IN_JOB_ROOT = f"{OUTPUT_DIR}/{METRICS}"
SUCCESS_IN_JOB_ROOT = f"{OUTPUT_DIR}/success"
FAILURE_IN_JOB_ROOT = f"{OUTPUT_DIR}/{FAILURE}"


class ArtifactUploads:
    """This run's uploads into the job's output: what it already sent (the record in the job's state directory, kept
    across retries), what it claimed, and the URIs sent so far (`uploaded`: artifact name -> URI)."""

    def __init__(self, ctx: JobContext, tree: JobRoot):
        self.ctx, self.tree, self.storage = ctx, tree, ctx.storage
        self.out = ctx.spec.job_output_uri
        # Packed archives and the upload record are platform state: outside the job root (operators/state/job_state.py).
        self.artifacts = Path(ensure_state_dir(ctx.settings.workspace, ctx.spec.job_name, ARTIFACTS))
        self.record_path = Path(state_path(ctx.settings.workspace, ctx.spec.job_name, UPLOADED))
        self.record = json.loads(self.record_path.read_text()) if self.record_path.is_file() else {}
        self.uploaded: dict[str, str] = {}

    def _save_record(self) -> None:
        tmp = self.record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record))
        os.replace(tmp, self.record_path)

    def remember(self, name: str, st: os.stat_result) -> None:
        uri = self.out + name
        self.record[uri] = [st.st_size, st.st_mtime_ns]
        self._save_record()
        self.ctx.log.info("Uploaded %s (%d bytes)", uri, st.st_size)
        self.uploaded[name] = uri

    def claim_remote(self, name: str) -> None:
        """A model.tar.gz there that this run did not upload belongs to another run: never overwrite it."""
        uri = self.out + name
        if uri in self.record:
            return
        if name == MODEL and self.storage.exists(uri):
            raise StageFailed(f"{uri} exists and was not uploaded by this run of job {self.ctx.spec.job_name}: a "
                              "published model is never overwritten; give this run another job_name")
        self.record[uri] = "pending"  # ours from now on, even if we die before the upload is recorded
        self._save_record()

    def upload_once(self, local: str, st: os.stat_result, name: str) -> None:
        uri = self.out + name
        if self.record.get(uri) == [st.st_size, st.st_mtime_ns] and self.storage.exists(uri):
            self.ctx.log.info("%s already uploaded (retry): skipped", uri)
            self.uploaded[name] = uri
            return
        self.claim_remote(name)
        self.storage.upload_file(local, uri)
        self.remember(name, st)

    def upload_job_file(self, rel: str, name: str) -> None:
        """A file of the job root, uploaded from the descriptor it was checked on (operators/fs)."""
        with self.tree.pinned_path(rel) as (path, st):
            self.upload_once(path, st, name)

    def pack_and_upload_once(self, src: str, name: str) -> None:
        target = self.artifacts / name
        success = self.tree.stat(SUCCESS_IN_JOB_ROOT)
        if target.is_file() and success and target.stat().st_mtime >= success.st_mtime:
            self.upload_once(str(target), target.stat(), name)  # packed by an earlier attempt of this task
            return
        # Packed and uploaded at once: each part goes up while the next is being compressed.
        self.claim_remote(name)
        # At most what the job root may hold: sizes can claim more than the disk holds (sparse files are packed
        # whole, zeros read and compressed by the worker), the job's disk cap bounds what packing costs.
        ctx = self.ctx
        cap = job_disk_cap(ctx.spec.resources.disk, ctx.settings.job_disk_limit)
        try:
            self.storage.upload_packed_directory(src, self.out + name, str(target), within=ctx.layout.root,
                                                 max_content=cap)
        except PackTooLargeError as err:
            raise StageFailed(
                f"cannot pack {name}: the files of {self.tree.relative(src)}/ add up to more than the job's disk cap "
                f"of {human(cap)} ({err}; a sparse file counts at its full size): nothing was published; the model "
                "must fit in resources.disk") from None
        self.remember(name, target.stat())


def upload_artifacts(ctx: JobContext, *, metrics: Mapping[str, Any] | None = None,
                     stage_results: Mapping[str, Any] | None = None,
                     triggering_user: str | None = None) -> UploadedArtifacts:
    """`metrics`: the job's metrics where they are not in the job root (the cluster's data plane: the launch task
    recorded them), written as output/metrics.json before the upload. `stage_results` (the earlier stages' result
    dicts, operators/engine/lineage.py STAGE_RESULTS) and `triggering_user`: what the run's lineage record names."""
    with failing_fast():
        try:
            uploaded = _upload(ctx, metrics)
            lineage_uri, lineage_sha256 = publish_lineage(ctx, uploaded, stage_results, triggering_user)
            return replace(uploaded, lineage_uri=lineage_uri, lineage_sha256=lineage_sha256)
        except DiskFullError:
            raise
        except OSError as err:  # the stage's own small files (records, the artifacts dir) on a full disk
            if not is_disk_full(err):
                raise
            raise disk_full_error("the upload stage's records", ctx.layout.root, None, PACK_TODO) from None


def _upload(ctx: JobContext, metrics: Mapping[str, Any] | None) -> UploadedArtifacts:
    spec, layout = ctx.spec, ctx.layout
    if not os.path.isdir(layout.root):
        raise StageSkipped("the job root was never created (an earlier stage failed): nothing to upload")
    ctx.claim_job()  # another run's job root: never upload over its artifacts
    _release_cache_entries(ctx)
    tree = JobRoot(layout.root)  # the tenant's: no link followed, only regular files read (operators/fs)
    has_success, has_failure = tree.is_file(SUCCESS_IN_JOB_ROOT), tree.is_file(FAILURE_IN_JOB_ROOT)
    if not has_success and not has_failure:
        raise StageSkipped("training did not run (an earlier stage failed): nothing to upload")
    # Whose run this is, beside its artifacts and before the first of them: what resume_from "latest" and the checks
    # of other runs' locations go by (operators/state/owner_records.py).
    try:
        record_job_area(ctx.storage, spec.output_path, spec.job_name, ctx.owner_record())
    except SpecError as err:
        raise StageFailed(f"nothing uploaded: {err}") from None
    uploads = ArtifactUploads(ctx, tree)
    if metrics is not None:  # what the worker matched, written where the shared-volume mode writes it
        recorded = MetricCollector()
        recorded.load_series(metrics.get("series"))
        try:
            tree.write_json(METRICS_IN_JOB_ROOT, recorded.to_json())
        except OSError as err:  # the job's output/ may refuse it: the model and the reason still go up
            ctx.log.warning("Could not write %s into the job root: %s", METRICS_IN_JOB_ROOT, err)
    if has_success and not has_failure:
        uploads.pack_and_upload_once(layout.model_dir, MODEL)
        if tree.has_entries(tree.relative(layout.output_data_dir)):
            uploads.pack_and_upload_once(layout.output_data_dir, OUTPUT_ARCHIVE)
        if tree.is_file(METRICS_IN_JOB_ROOT):
            uploads.upload_job_file(METRICS_IN_JOB_ROOT, METRICS)
        if ctx.storage.exists(uploads.out + FAILURE):
            ctx.storage.delete(uploads.out + FAILURE)  # from an earlier failed attempt of this job
        return UploadedArtifacts("succeeded", uploads.uploaded, model_uri=uploads.uploaded[MODEL])
    uploads.upload_job_file(FAILURE_IN_JOB_ROOT, FAILURE)
    if tree.is_file(METRICS_IN_JOB_ROOT):
        uploads.upload_job_file(METRICS_IN_JOB_ROOT, METRICS)
    ctx.log.warning("Training did not succeed: the reason is at %s; no model was uploaded", uploads.uploaded[FAILURE])
    return UploadedArtifacts("failed", uploads.uploaded,
                             failure=tree.read_text(FAILURE_IN_JOB_ROOT, 64 * 1024, tail=True)[-2000:])


def _release_cache_entries(ctx: JobContext) -> None:
    """Training is over: the job's channels no longer pin their cache entries against eviction."""
    # lazy: data cache -> the storage clients (botocore, obstore)
    from operators.cache.data_cache import DataCacheHook

    DataCacheHook(ctx.settings.cache_dir, ctx.storage, max_bytes=ctx.settings.cache_max_bytes).release(
        ctx.spec.job_name)

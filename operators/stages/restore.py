from __future__ import annotations

import os
import tempfile

from operators.fs.job_root import JobRoot
from operators.fs.safe_tar import safe_extract
from operators.stages.base import JobStageOperator, storage_failures_fail_fast
from operators.stages.in_cluster import runs_in_cluster


def find_latest_model(storage, output_path: str, base_job_name: str, exclude_job: str) -> str | None:
    """The newest `<output_path>/<base_job_name>-*/output/model.tar.gz`, other than the running job's own."""
    prefix = output_path.rstrip("/") + "/"
    newest = None
    for obj in storage.list_objects(prefix):
        parts = obj.relative_path.split("/")
        if len(parts) != 3 or parts[1:] != ["output", "model.tar.gz"]:
            continue
        job = parts[0]
        if job == exclude_job or not job.startswith(base_job_name + "-"):
            continue
        candidate = (obj.last_modified, job)
        if newest is None or candidate > newest:
            newest = candidate
    return f"{prefix}{newest[1]}/output/model.tar.gz" if newest else None


class RestoreOperator(JobStageOperator):
    """Incremental training: checkpoint_path contents into the checkpoint dir; the resume_from model into channel `model`.

    resume_from "latest" is the newest model.tar.gz of the same base_job_name under output_path (found by listing object
    storage: task code has no metadata-DB access).

    The job root may hold what an earlier attempt's script left: links in the checkpoint dir are removed (with a
    warning) and the directories written into are checked to be real ones, so nothing is written through a link.
    """

    ui_color = "#fff3e0"

    @runs_in_cluster
    @storage_failures_fail_fast
    def execute(self, context) -> dict:
        spec, layout, storage = self.spec, self.layout, self.storage
        tree = JobRoot(layout.root)
        result = {"checkpoint_files": 0, "resumed_from": None}
        if spec.checkpoint_path:
            checkpoints = tree.relative(layout.checkpoint_dir)
            tree.ensure_dir(os.path.dirname(checkpoints))  # UnsafePathError naming a linked parent
            tree.remove_links(checkpoints)
            tree.ensure_dir(checkpoints)
            if storage.list_objects(spec.checkpoint_path.rstrip("/") + "/"):
                stats = storage.download(spec.checkpoint_path.rstrip("/") + "/", layout.checkpoint_dir)
                result["checkpoint_files"] = stats.files
                self.log.info("Restored %d checkpoint file(s) from %s", stats.files, spec.checkpoint_path)
            else:
                self.log.info("No checkpoints at %s yet: training starts fresh", spec.checkpoint_path)
        if spec.resume_from:
            model_uri = spec.resume_from
            if model_uri == "latest":
                model_uri = find_latest_model(storage, spec.output_path, spec.base_job_name or "", spec.job_name)
            model_channel = layout.channel_dir("model")
            tree.ensure_dir(os.path.dirname(tree.relative(model_channel)))  # input/data: a real directory
            if model_uri is None:
                os.makedirs(model_channel, exist_ok=True)
                self.log.info("resume_from=latest: no earlier model of %s under %s; training starts fresh",
                              spec.base_job_name, spec.output_path)
            else:
                with tempfile.TemporaryDirectory(dir=layout.root, prefix=".resume-") as tmp:
                    archive = os.path.join(tmp, "model.tar.gz")
                    storage.download(model_uri, archive)
                    tree.remove(tree.relative(model_channel))  # a link there goes itself
                    safe_extract(archive, model_channel)
                result["resumed_from"] = model_uri
                self.log.info("Resuming from %s (extracted into input channel 'model')", model_uri)
        return result

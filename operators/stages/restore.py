from __future__ import annotations

import os
import tempfile

from operators.airflow_compat import AirflowFailException

from operators.fs.job_root import JobRoot
from operators.fs.safe_tar import safe_extract
from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import RESERVED_NAMES
from operators.stages.base import JobStageOperator, storage_failures_fail_fast
from operators.stages.in_cluster import runs_in_cluster
from operators.state.owner_records import check_write, latest_model
from operators.storage.location import ObjectListing


class RestoreOperator(JobStageOperator):
    """Incremental training: checkpoint_path contents into the checkpoint dir; the resume_from model into channel `model`.

    resume_from "latest" is the newest model.tar.gz of the same base_job_name under output_path that the platform
    recorded as this run's owner's (operators/state/owner_records.py latest_model): another owner's run, whatever its
    name, is never resumed from.

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
            # Once more, right before the job can write there: a run of another owner recorded below this
            # checkpoint_path since validate_spec claimed it would be synced over (operators/state/owner_records.py).
            try:
                check_write(storage, "checkpoint_path", spec.checkpoint_path, self.job_owner, holds=True)
            except SpecError as err:
                raise AirflowFailException(f"invalid job spec: {err}") from None
            checkpoints = tree.relative(layout.checkpoint_dir)
            tree.ensure_dir(os.path.dirname(checkpoints))  # UnsafePathError naming a linked parent
            tree.remove_links(checkpoints)
            tree.ensure_dir(checkpoints)
            listing = storage.describe(spec.checkpoint_path.rstrip("/") + "/")
            # the platform's claim of the checkpoint_path stays where it is (operators/state/owner_records.py)
            listing = ObjectListing(listing.location, listing.is_prefix, tuple(
                o for o in listing.objects if o.relative_path.split("/")[0] not in RESERVED_NAMES))
            if listing.objects:
                stats = storage.download_listing(listing, layout.checkpoint_dir)
                result["checkpoint_files"] = stats.files
                self.log.info("Restored %d checkpoint file(s) from %s", stats.files, spec.checkpoint_path)
            else:
                self.log.info("No checkpoints at %s yet: training starts fresh", spec.checkpoint_path)
        if spec.resume_from:
            model_uri = spec.resume_from
            if model_uri == "latest":
                model_uri = latest_model(storage, spec.output_path, spec.base_job_name or "", spec.job_name,
                                         self.job_owner, self.log)
            model_channel = layout.channel_dir("model")
            tree.ensure_dir(os.path.dirname(tree.relative(model_channel)))  # input/data: a real directory
            if model_uri is None:
                os.makedirs(model_channel, exist_ok=True)
                self.log.info("resume_from=latest: no earlier model of %s's lineage %s under %s; training starts "
                              "fresh", self.job_owner, spec.base_job_name, spec.output_path)
            else:
                with tempfile.TemporaryDirectory(dir=layout.root, prefix=".resume-") as tmp:
                    archive = os.path.join(tmp, "model.tar.gz")
                    storage.download(model_uri, archive)
                    tree.remove(tree.relative(model_channel))  # a link there goes itself
                    safe_extract(archive, model_channel)
                result["resumed_from"] = model_uri
                self.log.info("Resuming from %s (extracted into input channel 'model')", model_uri)
        return result

"""The upload stage's last step: the run's lineage record (operators/lineage/record.py), built from the validated spec
and the earlier stages' results, kept in the job's state directory (where no tenant writes) and published from that
copy as `<output_path>/<job_name>/output/lineage.json`, beside the model.

The stages' results are the primitives the upload task is given (its template's XComArgs, or the step's inputs in the
cluster): {"stage_code", "prefetch", "write_configs", "restore", "launch"} -> that stage's result dict (None: the stage
did not finish; its part of the record stays empty, never guessed)."""

from __future__ import annotations

from typing import Any, Mapping

from operators.engine.context import JobContext
from operators.engine.results import UploadedArtifacts
from operators.lineage.record import build_record, kept_sha256, publish_record, record_summary

# The earlier stages whose results the record is built from: build_record's keyword arguments.
STAGE_RESULTS = ("stage_code", "prefetch", "write_configs", "restore", "launch")


def ran_image(ctx: JobContext, launch: Mapping[str, Any] | None) -> dict[str, str | None]:
    """build_record's image arguments: the digest the backend ran (the launch summary's: its result, or a failed
    launch's "outcome"), and the image it was asked for (the spec's, else [training] default_image, as the launch
    request names it); the local backend runs no image, so its record names none."""
    if ctx.spec.backend == "local":
        return {"image_name": None, "image_digest": None}
    return {"image_name": ctx.spec.image_uri or getattr(ctx.settings, "default_image", None),
            "image_digest": (launch or {}).get("image_digest")}


def publish_lineage(ctx: JobContext, upload: UploadedArtifacts, stage_results: Mapping[str, Any] | None = None,
                    triggering_user: str | None = None) -> tuple[str | None, str | None]:
    """Build, keep and publish the run's record; its published URI and the sha256 of the document published there.
    A record that cannot be built (results of an unexpected shape) is a warning and (None, None): the model is
    published all the same. A failing store raises, as any other upload does (the task's retries publish it; the
    upload sends nothing twice)."""
    given = {name: value for name, value in dict(stage_results or {}).items()
             if name in STAGE_RESULTS and isinstance(value, Mapping)}
    try:
        record = build_record(ctx.job, dag_id=ctx.dag_id, run_id=ctx.run_id, triggering_user=triggering_user,
                              upload=upload.to_dict(), **ran_image(ctx, given.get("launch")), **given)
    except (ValueError, TypeError) as err:  # pydantic's ValidationError is a ValueError
        ctx.log.warning("Could not build the lineage record of %s (none is published): %s", ctx.spec.job_name, err)
        return None, None
    uri = publish_record(ctx.storage, ctx.settings.workspace, record)
    ctx.log.info("Lineage published at %s (%s)", uri, record_summary(record))
    return uri, kept_sha256(ctx.settings.workspace, record.job_name)

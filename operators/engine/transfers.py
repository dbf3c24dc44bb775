"""The engine functions of the stages before the training: stage the code, prefetch the input channels, write the
job's configs, restore checkpoints and the model to resume from. Each takes a JobContext and returns its typed result
(operators/engine/results.py); the stage operators (operators/stages/) and the cluster's step (operators/engine/step.py)
call them."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping

from training_runtime.layouts import create_directories

from operators.cache.views import link_view
from operators.engine.context import JobContext
from operators.engine.errors import StageFailed, failing_fast
from operators.engine.results import Restored, StagedChannel, StagedChannels, StagedCode, WrittenConfigs
from operators.fs.job_root import JobRoot
from operators.job_outputs import MODEL
from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import RESERVED_NAMES
from operators.launch.declaration import HostPlan
from operators.launch.job_configs import write_job_configs
from operators.launch.registry import declaration_for, launcher_for
from operators.lineage.code_digest import code_digest
from operators.state.owner_records import check_write, latest_model
from operators.state.retention import collect_garbage
from operators.storage.disk_space import CACHE_TODO, DiskFullError, disk_full_error, is_disk_full
from operators.storage.location import ObjectListing


def stage_code(ctx: JobContext, *, check_locations: bool = False) -> StagedCode:
    """The training code (a prefix, a .tar.gz object, a local dir or .tar.gz) into the job root's code directory.
    `check_locations`: check the spec's locations against the owner records first (a step in the cluster: the worker's
    validate_spec had no storage identity for them)."""
    # lazy: staging -> the storage clients (botocore, obstore)
    from operators.staging.code import stage_code as stage_code_into

    with failing_fast():
        if check_locations:
            ctx.check_owner_records()
        ctx.claim_job()
        create_directories(ctx.layout, channels=list(ctx.spec.inputs))
        stats = stage_code_into(ctx.storage, ctx.spec.source_dir, ctx.layout.code_dir)
    digest = _code_digest(ctx)
    ctx.log.info("Code from %s staged into %s: %d files, %d bytes, digest %s", ctx.spec.source_dir,
                 ctx.layout.code_dir, stats.files, stats.bytes, digest or "unknown")
    _check_code_pin(ctx, digest)
    return StagedCode(ctx.layout.code_dir, stats.files, stats.bytes, digest)


def _check_code_pin(ctx: JobContext, digest: str | None) -> None:
    """A reproduction stages the code its run staged: StageFailed (one line: the source, both digests, what to do)
    when the staged tree's digest is another (a prefix rewritten since, another archive under the same name)."""
    pin = ctx.spec.reproduces
    if pin is None or not pin.code_digest or digest == pin.code_digest:
        return
    raise StageFailed(
        f"reproduces.code_digest: the code at {ctx.spec.source_dir} is not what job {pin.job_name} ran (digest "
        f"{digest or 'unreadable'}, the run's {pin.code_digest}): it changed since; put that code back, or trigger "
        "without reproduces (Clone) to train on the code as it is now")


def _data_version_check(ctx: JobContext, channel: str, uri: str):
    """The check of a reproduction's pin on `channel`, called with the data version of its listing before anything
    is downloaded (DataCacheHook.prefetch's check_key); None: nothing pinned."""
    pin = ctx.spec.reproduces
    expected = pin.data_versions.get(channel) if pin is not None else None
    if expected is None:
        return None

    def check(version: str) -> None:
        if version == expected:
            return
        line = (f"channel {channel}: the data at {uri} changed since job {pin.job_name} (version {expected[:12]} -> "
                f"{version[:12]})")
        if not pin.allow_changed_data:
            raise StageFailed(f"{line}; set reproduces.allow_changed_data to train on the new data")
        ctx.log.warning("%s; training on the new data (reproduces.allow_changed_data)", line)

    return check


def _code_digest(ctx: JobContext) -> str | None:
    """The staged tree's digest (what the run's lineage names as its code), taken right after staging, before any of
    the job's code runs there; None, with a warning, when it cannot be read (the lineage then says it is unknown)."""
    try:
        return code_digest(ctx.layout.code_dir).digest
    except OSError as err:
        ctx.log.warning("Could not compute the digest of the staged code in %s (its lineage names none): %s",
                        ctx.layout.code_dir, err)
        return None


def prefetch_data(ctx: JobContext) -> StagedChannels:
    """Each input channel into the shared cache (once), then input/data/<channel> a view of it: a link into the cache,
    or an empty mount point where the backend mounts cache entries (pods, containers)."""
    with failing_fast():
        try:
            return _prefetch(ctx)
        except DiskFullError:
            raise
        except OSError as err:  # the cache's small files (pins, last-used stamps) or a job's views on a full disk
            if not is_disk_full(err):
                raise
            raise disk_full_error("the data cache's records and the job's channel views", ctx.settings.workspace,
                                  None, CACHE_TODO) from None


def _prefetch(ctx: JobContext) -> StagedChannels:
    # lazy: data cache -> the storage clients (botocore, obstore)
    from operators.cache.data_cache import DataCacheHook

    spec, layout = ctx.spec, ctx.layout
    cache = DataCacheHook(ctx.settings.cache_dir, ctx.storage, max_bytes=ctx.settings.cache_max_bytes)
    _collect_garbage(ctx, cache)
    mounts = declaration_for(spec.backend).capabilities.mounts_channels
    channels = {}
    if spec.inputs:  # a retry's job root may hold links an earlier script left: never put views through one
        tree = JobRoot(layout.root)
        tree.ensure_dir(tree.relative(layout.data_dir))
    for channel, uri in spec.inputs.items():
        entry = cache.prefetch(uri, user=spec.job_name, check_key=_data_version_check(ctx, channel, uri))
        view = layout.channel_dir(channel)
        if not mounts:
            link_view(entry, view)
        else:  # the backend mounts the entry read-only here: leave an empty mount point
            if os.path.islink(view):
                os.unlink(view)
            os.makedirs(view, exist_ok=True)
        ctx.log.info("Channel %s: %s -> %s (%s, %d files, %d bytes, %d bytes transferred)", channel, uri, entry.path,
                     "reused" if entry.reused else "downloaded", entry.files, entry.bytes, entry.bytes_transferred)
        channels[channel] = StagedChannel(str(entry.path), entry.is_file, uri, entry.file_name,
                                          data_version=entry.key, files=entry.files, bytes=entry.bytes)
    return StagedChannels(channels)


def _collect_garbage(ctx: JobContext, cache) -> None:
    """Release dead jobs' pins, apply [training] retention_days: best effort, never fails the job."""
    try:
        done = collect_garbage(ctx.settings.jobs_dir, cache, ctx.settings.retention_days)
    except Exception as err:  # noqa: BLE001 - garbage collection must never fail a training
        ctx.log.warning("Workspace garbage collection failed (the job goes on): %s", err)
        return
    if done.released_pins or done.removed_job_roots or done.removed_entries:
        ctx.log.info("Workspace garbage collection: released %d dead pins, removed %d job roots and %d cache entries",
                     len(done.released_pins), len(done.removed_job_roots), len(done.removed_entries))


def host_plan_for(backend: str) -> HostPlan:
    """The job's hosts as its backend names them: from its declaration where it gives them (no launcher imported, as
    in the cluster's step), else from its launcher."""
    return declaration_for(backend).host_plan or launcher_for(backend)


def write_configs(ctx: JobContext, channels: Mapping[str, Mapping[str, Any]] | StagedChannels | None = None,
                  hosts: HostPlan | None = None) -> WrittenConfigs:
    """input/config/ (hyperparameters.json, resourceconfig.json, inputdataconfig.json, trainingjobconfig.json), and
    what an earlier attempt of the same job left in output/ (success, failure) cleared (operators/launch/job_configs.py).
    `channels`: what prefetch_data returned; `hosts`: the backend's host plan (default: host_plan_for)."""
    if isinstance(channels, StagedChannels):
        channels = channels.to_dict()
    plan = hosts if hosts is not None else host_plan_for(ctx.spec.backend)
    names = write_job_configs(ctx.spec, ctx.layout, plan, channels)
    ctx.log.info("Configs written to %s for hosts %s", ctx.layout.config_dir, names)
    return WrittenConfigs(tuple(names), ctx.layout.config_dir)


def restore(ctx: JobContext) -> Restored:
    """Incremental training: checkpoint_path's contents into the checkpoint dir; the resume_from model into channel
    `model`. resume_from "latest" is the newest model of the same base_job_name under output_path that the platform
    recorded as this run's owner's (operators/state/owner_records.py latest_model).

    The job root may hold what an earlier attempt's script left: links in the checkpoint dir are removed (with a
    warning) and the directories written into are checked to be real ones, so nothing is written through a link."""
    with failing_fast():
        return _restore(ctx)


def _restore(ctx: JobContext) -> Restored:
    spec, layout, storage = ctx.spec, ctx.layout, ctx.storage
    tree = JobRoot(layout.root)
    checkpoint_files, resumed_from = 0, None
    if spec.checkpoint_path:
        # Once more, right before the job can write there: a run of another owner recorded below this
        # checkpoint_path since validate_spec claimed it would be synced over (operators/state/owner_records.py).
        try:
            check_write(storage, "checkpoint_path", spec.checkpoint_path, ctx.owner, holds=True)
        except SpecError as err:
            raise StageFailed(f"invalid job spec: {err}") from None
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
            checkpoint_files = stats.files
            ctx.log.info("Restored %d checkpoint file(s) from %s", stats.files, spec.checkpoint_path)
        else:
            ctx.log.info("No checkpoints at %s yet: training starts fresh", spec.checkpoint_path)
    if spec.resume_from:
        model_uri = spec.resume_from
        if model_uri == "latest":
            model_uri = latest_model(storage, spec.output_path, spec.base_job_name or "", spec.job_name, ctx.owner,
                                     ctx.log)
        model_channel = layout.channel_dir("model")
        tree.ensure_dir(os.path.dirname(tree.relative(model_channel)))  # input/data: a real directory
        if model_uri is None:
            os.makedirs(model_channel, exist_ok=True)
            ctx.log.info("resume_from=latest: no earlier model of %s's lineage %s under %s; training starts fresh",
                         ctx.owner, spec.base_job_name, spec.output_path)
        else:
            from operators.fs.safe_tar import safe_extract  # lazy: isal and tarfile, for a model to resume from only

            with tempfile.TemporaryDirectory(dir=layout.root, prefix=".resume-") as tmp:
                archive = os.path.join(tmp, MODEL)
                storage.download(model_uri, archive)
                tree.remove(tree.relative(model_channel))  # a link there goes itself
                safe_extract(archive, model_channel)
            resumed_from = model_uri
            ctx.log.info("Resuming from %s (extracted into input channel 'model')", model_uri)
    return Restored(checkpoint_files, resumed_from)

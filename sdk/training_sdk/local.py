"""Local mode (instance_type="local", the SDKs' local mode): the job runs on this machine, without Airflow.

Why in-process rather than shelling out to `airflow dags test`: local mode is for debugging a script before
submitting it, on a laptop that may have no Airflow at all; the SDK must not import Airflow. It runs the job
engine's own stage functions (operators/engine/), in the DAG's order, so a job behaves as it does in the DAG's local
backend:
  - the job spec's validation (same field names in errors)
  - stage_code, prefetch_data (the data cache, input/data/<channel> links into it), write_configs, restore
  - the launch: the engine's LaunchRequest run by the same launcher, `train` (the runtime) as child process trees,
    one per host, Airflow/cloud secrets stripped from the environment
  - upload_artifacts: model.tar.gz, output.tar.gz, metrics.json or the failure, and the run's lineage record
    (lineage.json beside the model: the code digest, each channel's data version), as a DAG run publishes them
all through one module, operators/local_api.py (its `__all__` is the whole API local mode may use; nothing there
imports Airflow). It comes from the platform's own distributions (`pip install airflow-training-jobs-sdk[local]`).
What differs from the DAG: the code is packed here as a remote fit() uploads it (.trainingignore honoured) into
<local workspace>/code/<sha256>.tar.gz, which stage_code stages; object storage inputs are downloaded with boto3 (the
SDK's retry policy, AWS_* variables: local mode reads no Airflow connection) into <local workspace>/downloads/ before
prefetch_data takes them like local inputs; the artifacts go to a local output_path (default <local
workspace>/models; the local workspace is $TRAINING_LOCAL_WORKSPACE, else ~/.training-sdk/local, the engine's
[training] workspace for the run). The run is DAG "local", its run id the job's name (what its lineage names).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from training_sdk.errors import SpecValidationError, TrainingJobError, TrainingSdkError
from training_sdk.packing import pack_source_dir
from training_sdk.storage import REMOTE_SCHEMES as _REMOTE

# What identifies a local run (the engine's JobContext, the run's lineage record): DAG "local", run id the job name.
LOCAL_DAG_ID = "local"


def local_workspace() -> Path:
    return Path(os.environ.get("TRAINING_LOCAL_WORKSPACE") or Path.home() / ".training-sdk" / "local").resolve()


def _platform():
    """The platform's local-mode API (operators/local_api.py): one module with a fixed set of names. Imported here
    only: the SDK alone (no platform installed) imports and submits jobs; local mode then says what to install."""
    try:
        # lazy: the platform and boto3, only in local mode / for a remote input
        from operators import local_api
    except ImportError as err:
        raise TrainingSdkError(f"local mode runs the platform's job engine, runtime and launcher ({err}); install "
                               "them with `pip install 'airflow-training-jobs-sdk[local]'` (from the repository: "
                               "`pip install -e runtime -e .`)") from None
    return local_api


class LocalJob:
    """A finished local job: the same questions as TrainingJob, answered from its job root and output path."""

    def __init__(self, job_name: str, job_root: str, output_uri: str, succeeded: bool, reason: str | None,
                 lineage_uri: str | None = None):
        self.job_name = job_name
        self.job_root = job_root
        self.output_uri = output_uri
        self.succeeded = succeeded
        self.reason = reason
        self.lineage_uri = lineage_uri  # the run's lineage.json (None: none could be built)

    def __repr__(self) -> str:
        return f"LocalJob({self.job_name!r}, {self.status})"

    @property
    def status(self) -> str:
        return "Completed" if self.succeeded else "Failed"

    def describe(self) -> dict[str, Any]:
        return {"job_name": self.job_name, "status": self.status, "job_root": self.job_root,
                "output": self.output_uri, "failure": self.reason}

    def model_data(self) -> str | None:
        path = os.path.join(self.output_uri, _platform().job_outputs.MODEL)
        return path if os.path.isfile(path) else None

    def metrics(self) -> dict[str, list[dict[str, Any]]]:
        try:
            return json.loads(Path(self.output_uri, _platform().job_outputs.METRICS).read_text()).get("series", {})
        except OSError:
            return {}

    def failure_reason(self) -> str | None:
        return self.reason

    def lineage(self) -> dict[str, Any] | None:
        """The run's lineage record (docs/tracking.md): what made its model."""
        try:
            return json.loads(Path(self.lineage_uri).read_text()) if self.lineage_uri else None
        except OSError:
            return None

    def logs(self, follow: bool = False, *, out=None) -> None:
        stream = out or sys.stdout
        log = Path(self.job_root, ".artifacts", "training.log")
        if log.is_file():
            stream.write(log.read_text(errors="replace"))

    def wait(self, logs: bool = True, **_: Any) -> LocalJob:
        if not self.succeeded:
            raise TrainingJobError(self.job_name, self.status, self.reason)
        return self

    def stop(self) -> None:
        """A local job has ended when fit() returns: nothing to stop."""


def _check_local_inputs(inputs: Mapping[str, str]) -> None:
    """A local input that is not there: one line naming the channel, before anything is staged."""
    for name, uri in inputs.items():
        if not _is_remote(uri) and not Path(uri.removeprefix("file://")).expanduser().exists():
            raise TrainingSdkError(f"inputs.{name}: {uri} does not exist")


def _is_remote(uri: str) -> bool:
    return "://" in uri and uri.split("://", 1)[0] in _REMOTE


def _local_sources(inputs: Mapping[str, str], downloads: Path) -> dict[str, str]:
    """Each channel as a local path the engine's prefetch reads: a local input as given (absolute), an object storage
    input downloaded first with boto3 (the SDK's retry policy, AWS_* variables: local mode reads no Airflow
    connection)."""
    return {name: str(_download(uri, downloads) if _is_remote(uri) else
                      Path(uri.removeprefix("file://")).expanduser().resolve())
            for name, uri in inputs.items()}


def _download(uri: str, downloads: Path) -> Path:
    """An object storage input (a prefix ending in / or one object) downloaded with boto3 (AWS_* variables, including
    AWS_ENDPOINT_URL for S3-compatible stores), into a directory keyed by the URI."""
    # lazy: the platform and boto3, only in local mode / for a remote input
    import hashlib

    try:
        from training_sdk.storage import s3_client, transfer_config

        client, config = s3_client(), transfer_config()
    except ImportError:
        raise TrainingSdkError(f"local mode downloads {uri} with boto3: pip install boto3 (or give a local path)") \
            from None
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    dest = downloads / hashlib.sha256(uri.encode()).hexdigest()[:16]
    if key and not key.endswith("/"):
        path = dest / os.path.basename(key)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, key, str(path), Config=config)
        return path
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(key):]
            if not rel or rel.endswith("/"):
                continue
            path = dest / rel
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, obj["Key"], str(path), Config=config)
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def _pack_code(source_dir: str, code_dir: Path, max_bytes: int) -> tuple[str, int]:
    """source_dir packed as a remote fit() uploads it (.trainingignore honoured, the same deterministic archive, named
    by its sha256) into <workspace>/code/: what the engine's stage_code stages and the run's lineage names. Kept, as an
    upload is: the same code is packed once. `max_bytes`: what the engine extracts, not the upload's smaller limit."""
    packed = pack_source_dir(source_dir, max_bytes=max_bytes)
    code_dir.mkdir(parents=True, exist_ok=True)
    archive = code_dir / f"{packed.sha256}.tar.gz"
    if not archive.is_file():
        tmp = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
        tmp.write_bytes(packed.data)
        os.replace(tmp, archive)
    return str(archive), packed.files


def _triggering_user() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no user name in this environment: the record names none
        return None


def run_local(est, inputs: Mapping[str, str], *, job_name: str | None = None, logs: bool = True) -> LocalJob:
    platform = _platform()
    workspace = local_workspace()
    spec_dict = est.job_spec(inputs, job_name)
    spec_dict.pop("backend", None)  # local mode is the local backend
    source_dir = str(spec_dict.get("source_dir") or "")
    if not source_dir or not os.path.isdir(source_dir):
        raise TrainingSdkError(f"source_dir {source_dir or '(none)'}: local mode needs a local directory of code")
    spec_dict.setdefault("output_path", str(workspace / "models"))
    output_path = str(spec_dict["output_path"])
    if "://" in output_path and not output_path.startswith("file://"):
        raise TrainingSdkError(f"output_path {output_path}: local mode writes artifacts to a local directory")
    spec_dict["output_path"] = os.path.abspath(output_path.removeprefix("file://"))
    spec = _validate(platform, spec_dict)
    references = sorted(spec.secret_references())
    if references:
        raise SpecValidationError(f"environment.{references[0]}", "a secret reference is read from Airflow, which "
                                  "local mode runs without; submit the job to Airflow (no instance_type='local')")
    _check_local_inputs(spec.inputs)

    # What the engine stages: the packed code and each channel as a local path (nothing here reads an Airflow
    # connection); the spec validated once more with them, so the job the engine runs is a valid spec.
    given_inputs = dict(spec.inputs)
    job = spec.to_dict()
    job["source_dir"], code_files = _pack_code(source_dir, workspace / "code", platform.CODE_MAX_BYTES)
    job["inputs"] = _local_sources(given_inputs, workspace / "downloads")
    spec = _validate(platform, job)

    settings = platform.TrainingSettings(workspace=str(workspace))
    layout = platform.layout_for(spec.layout, settings.job_root(spec.job_name))
    if os.path.isdir(layout.root):  # a job_name given again: a fresh job root, as the DAG's first stage makes one
        shutil.rmtree(layout.root)
    # A local run is identified as it always was: DAG "local", its run the job's name (one run per job_name).
    ctx = platform.JobContext(spec.to_dict(), dag_id=LOCAL_DAG_ID, run_id=spec.job_name, settings=settings, spec=spec,
                              layout=layout, log=logging.getLogger("training_sdk.local"))
    # Local mode runs the user's own code on their own machine, where no Airflow secrets live, and must work
    # without Airflow's config: no bubblewrap sandbox unless asked for, and the launcher's allowlisted environment.
    # No Airflow config here, so every setting is given; no retry ever reattaches in local mode, so a training whose
    # Python process died stops after a minute. The network is the user's own machine's (no worker ports to hide).
    launcher = platform.LocalLauncherHook(sandbox=os.environ.get("TRAINING_LOCAL_SANDBOX", "none"),
                                          environment_names=(), lease_seconds=60.0, network="host")
    with _one_line(platform, spec.job_name):
        channels, written, results = _stages_before_training(platform, ctx, launcher, given_inputs)
    print(f"[training_sdk] local job {spec.job_name}: {code_files} code files, "
          f"{len(channels.channels)} channel(s), {len(written.hosts)} host(s), job root "
          f"{layout.root}", file=sys.stderr, flush=True)

    job_root = platform.JobRootHere(layout, ctx.log)  # the launch's view of the job root, as the DAG's launch stage's
    with _one_line(platform, spec.job_name):  # checkpoint_path unreachable at the start or the end
        result, metrics = _train(platform, ctx, launcher, job_root, channels.to_dict(), logs)
    results["launch"] = platform.launch_summary(result, metrics.final()).to_dict()
    succeeded = result.succeeded and os.path.isfile(layout.success_file)
    reason = None
    if not succeeded:
        reason = result.failure_reason or f"training failed with exit code {result.exit_code}"
        job_root.record_failure(reason)  # the runtime's own reason, if it wrote one, stays
    out = Path(spec.job_output_uri)
    for stale in platform.job_outputs.STALE_AFTER_A_RUN:  # a job_name given again: its last run's artifacts go
        (out / stale).unlink(missing_ok=True)
    with _one_line(platform, spec.job_name):
        uploaded = platform.upload_artifacts(ctx, stage_results=results, triggering_user=_triggering_user())
    if succeeded:
        print(f"[training_sdk] local job {spec.job_name} completed: model {uploaded.model_uri}", file=sys.stderr,
              flush=True)
    return LocalJob(spec.job_name, layout.root, str(out), succeeded, reason, lineage_uri=uploaded.lineage_uri)


@contextlib.contextmanager
def _one_line(platform, job_name: str) -> Iterator[None]:
    """An engine stage that could not do its work, or a store that failed it: one line naming the job."""
    try:
        yield
    except (platform.StageFailed, platform.StageSkipped) as err:
        raise TrainingSdkError(f"local job {job_name}: {err.reason}") from None
    except platform.StorageError as err:
        raise TrainingSdkError(f"local job {job_name}: {err}") from None


def _validate(platform, spec_dict: Mapping[str, Any]):
    try:
        return platform.validate_spec(spec_dict, default_backend="local", default_layout="ti")
    except platform.SpecError as err:
        raise SpecValidationError(err.field, str(err).split(": ", 1)[-1]) from None


def _stages_before_training(platform, ctx, launcher, given_inputs: Mapping[str, str]):
    """The engine's stages before the training, in the DAG's order: the staged channels and written configs (typed,
    what this run reads) and every result as the dict the upload's lineage record reads (an XCom's shape). A
    channel's URI there is the one the user gave (the engine read its local copy)."""
    staged = platform.stage_code(ctx)
    channels = platform.prefetch_data(ctx)
    prefetch = {name: {**channel.to_dict(), "uri": given_inputs.get(name, channel.uri)}
                for name, channel in channels.channels.items()}
    written = platform.write_configs(ctx, channels, hosts=launcher)
    restored = platform.restore(ctx)
    return channels, written, {"stage_code": staged.to_dict(), "prefetch": prefetch, "write_configs": written.to_dict(),
                               "restore": restored.to_dict()}


def _train(platform, ctx, launcher, files, channels: Mapping[str, Any], logs: bool):
    """The launch: the engine's LaunchRequest run by the local launcher, its lines in .artifacts/training.log (and on
    stdout), matched against metric_definitions; checkpoint_path synced while it trains and at the end; then the
    metrics the script wrote to its metrics stream join them in the job root's metrics.json, which the upload sends."""
    spec, layout = ctx.spec, ctx.layout
    artifacts = Path(layout.root, ".artifacts")
    artifacts.mkdir(exist_ok=True)
    metrics = files.metrics([m.model_dump() for m in spec.metric_definitions])
    request = platform.launch_request(spec, layout, ctx.settings, launcher, channels=channels, volume_here=files.here)
    sync = files.checkpoint_sync(ctx.storage, spec, ctx.settings)
    if sync:
        sync.start()
    try:
        with (artifacts / "training.log").open("w") as log:
            def on_line(line: str) -> None:
                log.write(line + "\n")
                metrics.feed(line)
                if logs:
                    print(line, flush=True)

            result = launcher.run(request, on_line)
    finally:
        if sync:
            sync.stop()
    files.record_final(request.job_root, metrics)
    if sync:
        sync.sync_final()
    return result, metrics

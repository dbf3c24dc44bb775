"""Local mode (instance_type="local", the SDKs' local mode): the job runs on this machine, without Airflow.

Why in-process rather than shelling out to `airflow dags test`: local mode is for debugging a script before
submitting it, on a laptop that may have no Airflow at all; the SDK must not import Airflow. What it does reuse is
every Airflow-free piece of the platform, so a job behaves as it does in the DAG's local backend:
  - the job spec's validation (same field names in errors)
  - the same input/config/ files as the write_configs stage
  - the same launcher: `train` (the runtime) as child process trees, one per host, Airflow/cloud secrets stripped
    from the environment
  - the same metrics.json and model.tar.gz
all through one module, operators/local_api.py (its `__all__` is the whole API local mode may use). It comes from
the platform's own distributions (`pip install airflow-training-jobs-sdk[local]`: airflow-training-jobs-runtime and airflow-training-jobs
installed without their Airflow requirements). What differs from the DAG: the code is copied
(with the same exclude rules as an upload) instead of staged from object storage, local input paths are linked into
input/data/<channel> (object storage inputs are downloaded with boto3), and the artifacts go to a local output_path
(default <local workspace>/models; the local workspace is $TRAINING_LOCAL_WORKSPACE, else ~/.training-sdk/local).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Mapping

from training_sdk.errors import SpecValidationError, TrainingJobError, TrainingSdkError
from training_sdk.packing import list_files
from training_sdk.storage import REMOTE_SCHEMES as _REMOTE


def local_workspace() -> Path:
    return Path(os.environ.get("TRAINING_LOCAL_WORKSPACE") or Path.home() / ".training-sdk" / "local").resolve()


def _platform():
    """The platform's local-mode API (operators/local_api.py): one module with a fixed set of names."""
    try:
        # lazy: the platform and boto3, only in local mode / for a remote input
        from operators import local_api
    except ImportError as err:
        raise TrainingSdkError(f"local mode needs the platform's runtime and launcher ({err}); install them with "
                               f"`pip install -e runtime -e . --no-deps` from the repository (or airflow-training-jobs-sdk[local])") \
            from None
    return local_api


class LocalJob:
    """A finished local job: the same questions as TrainingJob, answered from its job root and output path."""

    def __init__(self, job_name: str, job_root: str, output_uri: str, succeeded: bool, reason: str | None):
        self.job_name = job_name
        self.job_root = job_root
        self.output_uri = output_uri
        self.succeeded = succeeded
        self.reason = reason

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


def _stage_inputs(layout, inputs: Mapping[str, str], cache: Path) -> dict[str, dict[str, Any]]:
    """input/data/<channel>: a link to a local directory, or a directory holding a link to a local file (the DAG's
    local backend links cache entries the same way); object storage inputs are downloaded once into `cache`."""
    channels: dict[str, dict[str, Any]] = {}
    for name, uri in inputs.items():
        source = _download(uri, cache) if "://" in uri and uri.split("://", 1)[0] in _REMOTE else \
            Path(uri.removeprefix("file://")).expanduser().resolve()
        if not source.exists():
            raise TrainingSdkError(f"inputs.{name}: {uri} does not exist")
        target = Path(layout.channel_dir(name))
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        if source.is_dir():
            target.symlink_to(source, target_is_directory=True)
            channels[name] = {"is_file": False, "file_name": None}
        else:
            target.mkdir(parents=True)
            (target / source.name).symlink_to(source)
            channels[name] = {"is_file": True, "file_name": source.name}
    return channels


def _download(uri: str, cache: Path) -> Path:
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
    dest = cache / hashlib.sha256(uri.encode()).hexdigest()[:16]
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


def _copy_code(source_dir: str, code_dir: str) -> int:
    shutil.rmtree(code_dir, ignore_errors=True)
    os.makedirs(code_dir)
    files = list_files(source_dir)
    for rel, path in files:
        dest = Path(code_dir, rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    return len(files)


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
    try:
        spec = platform.validate_spec(spec_dict, default_backend="local", default_layout="ti")
    except platform.SpecError as err:
        raise SpecValidationError(err.field, str(err).split(": ", 1)[-1]) from None
    references = sorted(spec.secret_references())
    if references:
        raise SpecValidationError(f"environment.{references[0]}", "a secret reference is read from Airflow, which "
                                  "local mode runs without; submit the job to Airflow (no instance_type='local')")

    layout = platform.layout_for(spec.layout, str(workspace / "jobs" / spec.job_name))
    if os.path.isdir(layout.root):
        shutil.rmtree(layout.root)
    platform.create_directories(layout, channels=list(spec.inputs))
    files = _copy_code(source_dir, layout.code_dir)
    channels = _stage_inputs(layout, spec.inputs, workspace / "cache")
    # Local mode runs the user's own code on their own machine, where no Airflow secrets live, and must work
    # without Airflow's config: no bubblewrap sandbox unless asked for, and the launcher's allowlisted environment.
    # No Airflow config here, so every setting is given; no retry ever reattaches in local mode, so a training whose
    # Python process died stops after a minute. The network is the user's own machine's (no worker ports to hide).
    launcher = platform.LocalLauncherHook(sandbox=os.environ.get("TRAINING_LOCAL_SANDBOX", "none"),
                                          environment_names=(), lease_seconds=60.0, network="host")
    # The same engine functions as the DAG's write_configs and launch stages (operators/engine/): the same files, the
    # same LaunchRequest (no Airflow config here: the settings are the local workspace's, the rest their defaults).
    settings = platform.TrainingSettings(workspace=str(workspace))
    ctx = platform.JobContext(spec.to_dict(), dag_id="local", run_id=spec.job_name, settings=settings, spec=spec,
                              layout=layout)
    hosts = platform.write_configs(ctx, channels, hosts=launcher).hosts
    print(f"[training_sdk] local job {spec.job_name}: {files} code files, {len(channels)} channel(s), "
          f"{len(hosts)} host(s), job root {layout.root}", file=sys.stderr, flush=True)

    artifacts = Path(layout.root, ".artifacts")
    artifacts.mkdir(exist_ok=True)
    metrics = platform.MetricCollector([m.model_dump() for m in spec.metric_definitions])
    request = platform.launch_request(spec, layout, settings, launcher, volume_here=True)
    with (artifacts / "training.log").open("w") as log:
        def on_line(line: str) -> None:
            log.write(line + "\n")
            metrics.feed(line)
            if logs:
                print(line, flush=True)

        result = launcher.run(request, on_line)
    metrics.read_file(os.path.join(layout.root, platform.METRICS_STREAM))
    out = Path(spec.job_output_uri)
    out.mkdir(parents=True, exist_ok=True)
    outputs = platform.job_outputs
    for stale in outputs.STALE_AFTER_A_RUN:
        (out / stale).unlink(missing_ok=True)
    (out / outputs.METRICS).write_text(json.dumps(metrics.to_json(), indent=2))
    succeeded = result.succeeded and os.path.isfile(layout.success_file)
    if succeeded:
        platform.pack_directory(layout.model_dir, str(out / outputs.MODEL))
        if os.path.isdir(layout.output_data_dir) and any(Path(layout.output_data_dir).iterdir()):
            platform.pack_directory(layout.output_data_dir, str(out / outputs.OUTPUT_ARCHIVE))
        print(f"[training_sdk] local job {spec.job_name} completed: model {out / outputs.MODEL}", file=sys.stderr,
              flush=True)
        return LocalJob(spec.job_name, layout.root, str(out), True, None)
    reason = result.failure_reason or f"training failed with exit code {result.exit_code}"
    (out / outputs.FAILURE).write_text(reason + "\n")
    return LocalJob(spec.job_name, layout.root, str(out), False, reason)

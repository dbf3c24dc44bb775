"""Estimator: a training job described in the PAI / SageMaker vocabulary, run by the training_job DAG.

    est = Estimator(entry_point="train.py", source_dir="./src", hyperparameters={"epochs": 10},
                    metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    est.fit({"train": "s3://bucket/train/"})    # validate -> pack + upload code -> trigger -> stream the log -> wait
    est.model_data()                             # the model URI
    est.latest_job.metrics()

fit() order, so a bad spec costs nothing: the spec is checked against the DAG's own Params schema (from the REST API)
before the code is packed or uploaded, then the run is triggered with run id = job name.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from typing import Any, Mapping

from training_sdk.errors import TrainingSdkError
from training_sdk.job import TrainingJob
from training_sdk.packing import DEFAULT_MAX_BYTES, pack_source_dir
from training_sdk.ported_arguments import fit_inputs, fit_logs, translate
from training_sdk.session import Session
from training_sdk.storage import REMOTE_SCHEMES as _REMOTE_SCHEMES
from training_sdk.validation import validate_against_params

LOCAL_INSTANCE_TYPES = ("local", "local_gpu")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _is_remote(uri: str) -> bool:
    return "://" in uri and uri.split("://", 1)[0] in _REMOTE_SCHEMES


def _absolute(uri: str | None) -> str | None:
    """A relative local path is meaningless to the server: make it absolute here (the local `make airflow` shares this
    file system). URIs and absolute paths are left as they are."""
    if not isinstance(uri, str) or not uri or "://" in uri or os.path.isabs(uri):
        return uri
    return os.path.abspath(uri)


def _job_name_prefix(base: str | None) -> str | None:
    """A base_job_name as the DAG takes it: other platforms allow upper case and '_' (PAI's own example is
    "example_train_job"), job names here are DNS-1123 labels, so such a name is lower-cased with '-' for the rest."""
    if base is None or DNS1123_LABEL.match(base) and len(base) <= 50:
        return base
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", base.lower())).strip("-")[:50].rstrip("-") or None


def default_job_name(base: str, now: dt.datetime | None = None) -> str:
    """<base>-<UTC time to the millisecond>: DNS-1123, at most 63 characters (PAI: {base_job_name}_{datetime})."""
    now = now or dt.datetime.now(dt.timezone.utc)
    base = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", base.lower())).strip("-") or "training-job"
    return f"{base[:40].rstrip('-')}-{now:%Y%m%d-%H%M%S}-{now.microsecond // 1000:03d}"


class Estimator:
    """A training job's description; fit() runs it. Arguments are the spec keys of the training_job DAG (see
    docs/job-spec.md) under the names PAI and SageMaker use for them; their other arguments are taken, ignored with a
    warning or refused as ported_arguments.py says."""

    def __init__(self, entry_point: str | None = None, *, command: str | list[str] | None = None,
                 source_dir: str | None = None, hyperparameters: Mapping[str, Any] | None = None,
                 image_uri: str | None = None,
                 instance_type: str | None = None, instance_count: int | None = None, layout: str | None = None,
                 backend: str | None = None, output_path: str | None = None, checkpoint_path: str | None = None,
                 metric_definitions: list[Mapping[str, str]] | None = None, max_run_seconds: int | None = None,
                 environment: Mapping[str, Any] | None = None, base_job_name: str | None = None,
                 dag_id: str = "training_job", resources: Mapping[str, Any] | None = None,
                 distribution: str | Mapping[str, Any] | None = None, resume_from: str | None = None, code_location: str | None = None,
                 code_max_bytes: int = DEFAULT_MAX_BYTES, session: Session | None = None, **spec_extra: Any):
        # SageMaker's and PAI's own arguments, in this spec's words (ported_arguments.py says which and why)
        given = translate({"command": command, "environment": environment, "distribution": distribution,
                           "max_run_seconds": max_run_seconds, "checkpoint_path": checkpoint_path,
                           "image_uri": image_uri, "resources": resources, **spec_extra},
                          instance_type=instance_type, layout=layout)
        command, environment, distribution = given.pop("command"), given.pop("environment"), given.pop("distribution")
        max_run_seconds, checkpoint_path = given.pop("max_run_seconds"), given.pop("checkpoint_path")
        image_uri, resources, spec_extra = given.pop("image_uri"), given.pop("resources"), given
        if entry_point and command:
            raise TrainingSdkError("give entry_point or command, not both")
        if not entry_point and not command:
            raise TrainingSdkError("give entry_point (a .py or .sh in source_dir) or command (a shell command)")
        self.entry_point = entry_point
        self.command = command
        self.source_dir = source_dir
        self.hyperparameters = dict(hyperparameters or {})
        self.image_uri = image_uri
        self.instance_type = instance_type
        self.instance_count = instance_count
        self.layout = layout
        self.backend = backend
        self.output_path = output_path
        self.checkpoint_path = checkpoint_path
        self.metric_definitions = list(metric_definitions or [])
        self.max_run_seconds = max_run_seconds
        self.environment = dict(environment or {})
        self.base_job_name = _job_name_prefix(base_job_name)
        self.dag_id = dag_id
        self.resources = dict(resources or {})
        self.distribution = distribution
        self.resume_from = resume_from
        self.code_location = code_location
        self.code_max_bytes = code_max_bytes
        self.spec_extra = dict(spec_extra)
        self._session = session
        self.latest_job: TrainingJob | Any | None = None

    # -- the spec ---------------------------------------------------------------------------------------------
    @property
    def session(self) -> Session:
        if self._session is None:
            self._session = Session()
        return self._session

    @property
    def is_local(self) -> bool:
        return (self.instance_type or "").lower() in LOCAL_INSTANCE_TYPES

    def _base_name(self) -> str:
        if self.base_job_name:
            return self.base_job_name
        if self.entry_point:
            return os.path.splitext(os.path.basename(self.entry_point))[0].replace("_", "-") or "training-job"
        return "training-job"

    def job_spec(self, inputs: Mapping[str, str] | str | None = None, job_name: str | None = None) -> dict[str, Any]:
        """The DAG conf this estimator triggers (source_dir still the local path until fit() uploads it)."""
        values = {
            "job_name": job_name or default_job_name(self._base_name()),
            "base_job_name": self.base_job_name,
            "source_dir": self.source_dir,
            "entry_point": self.entry_point,
            "command": self.command,
            "hyperparameters": self.hyperparameters,
            "inputs": {name: _absolute(uri) for name, uri in fit_inputs(inputs).items()},
            "output_path": _absolute(self.output_path),
            "checkpoint_path": _absolute(self.checkpoint_path),
            "resume_from": self.resume_from,
            "instance_count": self.instance_count,
            "resources": self.resources,
            "image_uri": self.image_uri,
            "layout": self.layout,
            "distribution": self.distribution,
            "backend": self.backend,
            "max_run_seconds": self.max_run_seconds,
            "environment": self.environment,  # as given: a value, or a secret reference {"variable": ...}
            "metric_definitions": self.metric_definitions,
            **self.spec_extra,
        }
        return {k: v for k, v in values.items() if v is not None and v != {} and v != []}

    # -- running ----------------------------------------------------------------------------------------------
    def fit(self, inputs: Mapping[str, str] | str | None = None, wait: bool = True, logs: bool | str = True,
            job_name: str | None = None):
        """Run the job. inputs: channel -> URI. Returns the job (a TrainingJob; LocalJob in local mode); with wait=True
        it returns when the job ended and raises TrainingJobError with the reason when it failed. SageMaker's forms
        work too: fit("s3://bucket/train/") is channel 'training', logs="None" streams nothing."""
        logs = fit_logs(logs)
        if self.is_local:
            # lazy: local mode (the platform) and boto3 only where this path runs
            from training_sdk.local import run_local

            self.latest_job = run_local(self, inputs or {}, job_name=job_name, logs=logs)
            return self.latest_job.wait()  # raises TrainingJobError with the reason when it failed
        spec = self.job_spec(inputs, job_name)
        self.latest_job = self._submit(spec, self.dag_id)
        if wait:
            self.latest_job.wait(logs=logs)
        return self.latest_job

    def _submit(self, spec: dict[str, Any], dag_id: str, validate_spec: dict[str, Any] | None = None) -> TrainingJob:
        if not self.source_dir:
            raise TrainingSdkError("source_dir is required: a local directory or an object storage URI of the code")
        params = self.session.dag_params(dag_id)
        check = dict(validate_spec or spec)
        if "output_path" not in check and self._uploads_to_staging():
            check["output_path"] = "(the workspace's models/ directory)"  # filled in from the upload's answer
        validate_against_params(check, params, dag_id)
        spec = dict(spec)
        spec["source_dir"], default_output = self._stage_code(dag_id)
        if "output_path" not in spec:
            if not default_output:
                raise TrainingSdkError("output_path is required when the code is not uploaded through the workspace")
            spec["output_path"] = default_output
        self.session.trigger(dag_id, spec["job_name"], spec)
        print(f"[training_sdk] submitted {spec['job_name']} (DAG {dag_id}): "
              f"{self.session.api_url}/dags/{dag_id}/runs/{spec['job_name']}", file=sys.stderr, flush=True)
        return TrainingJob(spec["job_name"], dag_id=dag_id, session=self.session)

    def _uploads_to_staging(self) -> bool:
        return bool(self.source_dir) and os.path.isdir(self.source_dir) and not self.code_location

    def _stage_code(self, dag_id: str) -> tuple[str, str | None]:
        """(the source_dir the DAG reads, the default output_path) after packing and uploading a local source dir."""
        src = str(self.source_dir)
        if not os.path.isdir(src):
            return _absolute(src), None  # an object storage URI or an archive: the DAG stages it
        try:
            packed = pack_source_dir(src, self.code_max_bytes)
        except (ValueError, FileNotFoundError) as err:
            raise TrainingSdkError(str(err)) from None
        print(f"[training_sdk] packed {src}: {packed.files} files, {packed.bytes} bytes -> {len(packed.data)} bytes "
              f"(sha256 {packed.sha256[:12]})", file=sys.stderr, flush=True)
        if self.code_location:
            return _upload_to_storage(packed, self.code_location), None
        answer = self.session.upload_code(dag_id, packed.data, packed.sha256)
        return answer["source_dir"], answer.get("default_output_path")

    def model_data(self) -> str | None:
        """The model URI of the latest job (PAI: est.model_data(); SageMaker: est.model_data)."""
        if self.latest_job is None:
            raise TrainingSdkError("no job yet: call fit() (or Estimator.attach(job_name)) first")
        return self.latest_job.model_data()

    @classmethod
    def attach(cls, job_name: str, *, dag_id: str = "training_job", session: Session | None = None) -> Estimator:
        """An Estimator for an existing job (SageMaker's Estimator.attach): its spec, and latest_job set to it."""
        job = TrainingJob.attach(job_name, dag_id=dag_id, session=session)
        conf = dict(job.describe().get("conf") or {})
        known = {"entry_point", "command", "source_dir", "hyperparameters", "image_uri", "instance_count", "layout",
                 "backend", "output_path", "checkpoint_path", "metric_definitions", "max_run_seconds",
                 "environment", "base_job_name", "resources", "distribution", "resume_from"}
        kwargs = {k: v for k, v in conf.items() if k in known}
        if not kwargs.get("entry_point") and not kwargs.get("command"):
            kwargs["command"] = "(unknown)"
        est = cls(dag_id=dag_id, session=job.session, **kwargs)
        est.latest_job = job
        return est

    def wait(self, logs: bool = True):
        return self._latest().wait(logs=logs)

    def logs(self, follow: bool = False):
        return self._latest().logs(follow=follow)

    def stop(self):
        return self._latest().stop()

    def metrics(self):
        return self._latest().metrics()

    def _latest(self):
        if self.latest_job is None:
            raise TrainingSdkError("no job yet: call fit() (or Estimator.attach(job_name)) first")
        return self.latest_job


def _upload_to_storage(packed, code_location: str) -> str:
    """The packed code at <code_location>/<sha256>/sourcedir.tar.gz (SageMaker's code_location); returns its URI."""
    name = f"{packed.sha256[:16]}/sourcedir.tar.gz"
    if _is_remote(code_location):
        try:
            # lazy: local mode (the platform) and boto3 only where this path runs
            from training_sdk.storage import s3_client

            client = s3_client()
        except ImportError:
            raise TrainingSdkError(f"uploading code to {code_location} needs boto3 (pip install boto3)") from None
        bucket, _, prefix = code_location.split("://", 1)[1].partition("/")
        key = f"{prefix.rstrip('/')}/{name}".lstrip("/")
        client.put_object(Bucket=bucket, Key=key, Body=packed.data)
        return f"{code_location.split('://', 1)[0]}://{bucket}/{key}"
    base = code_location.removeprefix("file://")
    path = os.path.join(os.path.abspath(base), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(packed.data)
    os.replace(tmp, path)
    return path

"""The lineage record of one training run: which code, data, image, parent model and hyperparameters made its model,
where it ran, how it ended, and with which platform; one JSON document per run.

Where it lives:
    kept       `<workspace>/state/<job_name>/lineage.json` (record_path): the job's platform state, which no backend
               mounts and tenant code cannot write (operators/state/job_state.py), never the job root
    published  `<output_path>/<job_name>/output/lineage.json` (published_uri), beside model.tar.gz, uploaded from the
               kept copy; a run that resumes from a model finds its parent's record beside that model
               (lineage_uri_beside)

The record is built from primitives (build_record): the validated spec dict (validate_spec's XCom) and the stages'
result dicts. Facts no stage result carries yet are explicit arguments (the code digest, the channels' data versions,
the image digest the backend ran); a fact nobody gave is null in the record, never guessed.

SCHEMA_VERSION counts incompatible changes of the document: a reader refuses a record of another version with one
line rather than misreading it. Fields added with a default keep the version.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
import zlib
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Mapping
from urllib.parse import urlsplit
from urllib.request import url2pathname

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from operators.job_outputs import LINEAGE, MODEL
from operators.jobspec.model import JobSpec
from operators.jobspec.ownership import OWNER_KEY
from operators.state.job_state import ensure_state_dir, state_path

SCHEMA_VERSION = 1
LINEAGE_CARRIED = "lineage_record_z"  # the upload step's result key that carries the kept record to the worker
MAX_RECORD_BYTES = 1024 * 1024  # a record is a few KiB; what a reader of a carried or untrusted copy takes at most
LINEAGE_FILE = LINEAGE  # the kept copy's name in the job's state directory, and the published one's
MODEL_ARCHIVE = MODEL
_CACHE_KEY = re.compile(r"^[0-9a-f]{64}$")  # a data cache entry's directory name (operators/cache/data_cache.py)
_SDK_ARCHIVE = re.compile(r"(?:^|/)([0-9a-f]{64})\.tar\.gz$")  # an SDK upload: <sha256 of the archive>.tar.gz
# What `versions` names: the platform's own distributions, the runtime the job's processes run, and what drives them.
VERSIONED_DISTRIBUTIONS = ("airflow-training-jobs", "airflow-training-jobs-runtime", "airflow-training-jobs-sdk",
                           "apache-airflow", "apache-airflow-providers-openlineage", "mlflow-skinny")
CHECKOUT = Path(__file__).resolve().parents[2]
_CHECKOUT_PROJECTS = {"airflow-training-jobs": CHECKOUT, "airflow-training-jobs-runtime": CHECKOUT / "runtime",
                      "airflow-training-jobs-sdk": CHECKOUT / "sdk"}

Scalar = str | int | float | bool | None


class LineageError(ValueError):
    """A lineage document that cannot be read as this version's record; the message says why in one line."""


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CodeLineage(_Part):
    source_uri: str = Field(description="source_dir as the spec gave it")
    digest: str | None = Field(None, description="sha256 of the staged tree (operators/lineage/code_digest.py)")
    files: int | None = None
    bytes: int | None = None
    archive_sha256: str | None = Field(None, description="an SDK upload's content address (<sha256>.tar.gz)")


class ChannelLineage(_Part):
    uri: str
    data_version: str | None = Field(None, description="the data cache's key of the channel's listing: sha256 of "
                                                      "(URI, connection, every object's key, size and ETag)")
    objects: int | None = None
    bytes: int | None = None


class ImageLineage(_Part):
    backend: str
    name: str | None = Field(None, description="the image the spec asked for (None: the local backend runs none)")
    digest: str | None = Field(None, description="what the backend ran: Docker's image id, the pod's imageID")


class ResourcesLineage(_Part):
    instance_count: int
    cpu: str | float | None = None
    memory: str | float | None = None
    gpu: int = 0
    disk: str | float | None = None
    hosts: list[str] = Field(default_factory=list)


class ParentModel(_Part):
    requested: str = Field(description="resume_from as the spec gave it ('latest' or a model URI)")
    model_uri: str | None = Field(None, description="what it resolved to (None: 'latest' found no model)")
    lineage_uri: str | None = Field(None, description="where the parent's own lineage record is published")


class Outcome(_Part):
    status: Literal["succeeded", "failed", "stopped", "unknown"] = "unknown"
    failure_class: str | None = None
    exit_code: int | None = None
    final_metrics: dict[str, float | None] = Field(default_factory=dict)
    model_uri: str | None = None


class AirflowRun(_Part):
    dag_id: str
    run_id: str
    owner: str | None = Field(None, description="the run's owner: its triggering user, or its DAG")
    triggering_user: str | None = None


class RunReference(_Part):
    """The run a reproduction reproduces."""

    job_name: str
    dag_id: str | None = None
    run_id: str | None = None
    lineage_uri: str | None = None


class LineageRecord(_Part):
    schema_version: int = SCHEMA_VERSION
    job_name: str
    base_job_name: str | None = None
    created_at: str
    airflow: AirflowRun
    code: CodeLineage
    channels: dict[str, ChannelLineage] = Field(default_factory=dict)
    hyperparameters: dict[str, Scalar] = Field(default_factory=dict)
    image: ImageLineage
    resources: ResourcesLineage
    parent: ParentModel | None = None
    outcome: Outcome = Field(default_factory=Outcome)
    versions: dict[str, str] = Field(default_factory=dict)
    reproduces: RunReference | None = None
    published_uri: str | None = Field(None, description="where this record is published beside the model")

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(f"is {value}; this platform reads version {SCHEMA_VERSION}")
        return value

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> LineageRecord:
        """The record in `text`; LineageError (one line: the first problem and its field) when it is not one."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "document"
            raise LineageError(f"not a lineage record: {where}: {first['msg']}") from None

    @property
    def data_versions(self) -> dict[str, str | None]:
        return {name: channel.data_version for name, channel in self.channels.items()}


# -- where it lives -------------------------------------------------------------------------------------------------

def record_path(workspace: str, job_name: str) -> str:
    """The kept copy: in the job's platform state directory (no tenant writes there)."""
    return state_path(workspace, job_name, LINEAGE_FILE)


def published_uri(spec: JobSpec) -> str:
    """`<output_path>/<job_name>/output/lineage.json`: beside model.tar.gz, in JobSpec.job_output_uri."""
    return spec.job_output_uri + LINEAGE_FILE


def lineage_uri_beside(model_uri: str | None) -> str | None:
    """Where the record of the run that published `model_uri` (a model.tar.gz) is; None for anything else."""
    if not model_uri or model_uri.rstrip("/").rsplit("/", 1)[-1] != MODEL_ARCHIVE:
        return None
    return model_uri.rstrip("/").rsplit("/", 1)[0] + "/" + LINEAGE_FILE


def write_record(workspace: str, record: LineageRecord) -> str:
    """Keep `record` in the job's state directory (atomically: a reader sees the old record or the new one)."""
    ensure_state_dir(workspace, record.job_name)
    path = record_path(workspace, record.job_name)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w", encoding="utf-8") as out:
        out.write(record.to_json())
    os.replace(partial, path)
    return path


def read_record(workspace: str, job_name: str) -> LineageRecord | None:
    """The kept record of `job_name`, or None when there is none."""
    try:
        text = Path(record_path(workspace, job_name)).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return LineageRecord.from_json(text)


def kept_sha256(workspace: str, job_name: str) -> str | None:
    """The sha256 (hex) of the kept copy's bytes: what publish_record sent, and what keep_published checks."""
    try:
        return hashlib.sha256(Path(record_path(workspace, job_name)).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def carried_record(workspace: str, job_name: str, room: int) -> str | None:
    """The kept copy, compressed and base64'd, for a worker that cannot read it (the cluster's data plane keeps it in
    the cluster's workspace): it travels in the upload step's result, which the platform's own code writes. None when
    there is none or it needs more than `room` characters (the step's result must fit a termination message)."""
    try:
        data = Path(record_path(workspace, job_name)).read_bytes()
    except FileNotFoundError:
        return None
    packed = base64.b64encode(zlib.compress(data, 9)).decode("ascii")
    return packed if len(packed) <= room else None


def keep_carried(workspace: str, packed: str, sha256: str, job_name: str) -> LineageRecord:
    """Keep, in this side's state directory, the record `carried_record` packed, when its bytes have the sha256 the
    upload reported (what it published) and it is the record of `job_name` (the job this side validated: a record
    never lands in another job's state); LineageError (one line) when it is not such a record."""
    try:
        inflate = zlib.decompressobj()
        data = inflate.decompress(base64.b64decode(packed, validate=True), MAX_RECORD_BYTES)
    except (ValueError, zlib.error) as err:
        raise LineageError(f"the carried lineage record cannot be read: {err}") from None
    if inflate.unconsumed_tail or hashlib.sha256(data).hexdigest() != sha256:
        raise LineageError("the carried lineage record is not the one the upload published (its sha256 differs)")
    record = LineageRecord.from_json(data)
    if record.job_name != job_name:
        raise LineageError(f"the carried lineage record is job {record.job_name!r}'s, not {job_name!r}'s")
    ensure_state_dir(workspace, record.job_name)
    path = record_path(workspace, record.job_name)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "wb") as out:
        out.write(data)
    os.replace(partial, path)
    return record


def publish_record(storage, workspace: str, record: LineageRecord) -> str:
    """Upload the kept copy to its published URI (`storage`: an ObjectStorageHook); returns that URI. A retried upload
    whose record says what the kept one says (but when it was made) keeps the kept one and, where it was published,
    sends nothing again (the upload sends nothing twice)."""
    if not record.published_uri:
        raise ValueError(f"the lineage record of {record.job_name} names no published_uri")
    try:
        kept = read_record(workspace, record.job_name)
    except (OSError, ValueError):  # an unreadable kept copy is replaced
        kept = None
    if kept is not None and kept.model_copy(update={"created_at": record.created_at}) == record \
            and storage.exists(record.published_uri):
        return record.published_uri
    storage.upload_file(write_record(workspace, record), record.published_uri)
    return record.published_uri


# -- versions -------------------------------------------------------------------------------------------------------

def _checkout_version(project: Path) -> str | None:
    """A project run from the checkout (not installed): its pyproject's version, and the commit when .git says."""
    try:
        import tomllib  # lazy: Python 3.11+ only; on 3.10 a run from the checkout names no version
    except ImportError:
        return None
    try:
        version = tomllib.loads((project / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, ValueError):
        return None
    return _with_commit(version, project)


def _with_commit(version: str, project: Path) -> str:
    """`version+g<commit>` of the git checkout `project` is in (`version+checkout` when none is found)."""
    for folder in (project, *project.parents):
        if (folder / ".git").exists():
            commit = _checkout_commit(folder / ".git")
            return f"{version}+g{commit[:12]}" if commit else f"{version}+checkout"
    return f"{version}+checkout"


def _in_git_checkout(folder: Path) -> bool:
    return any((f / ".git").exists() for f in (folder, *folder.parents))


def _editable_checkout(name: str) -> Path | None:
    """The folder an editable install of `name` runs from (pip's direct_url.json), or None."""
    try:
        info = json.loads(metadata.distribution(name).read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    if not (info.get("dir_info") or {}).get("editable") or not str(info.get("url", "")).startswith("file://"):
        return None
    return Path(url2pathname(urlsplit(info["url"]).path))


def _checkout_commit(git: Path) -> str | None:
    """HEAD's commit, read from the files (no git process): a branch's ref, a packed ref, or a detached HEAD."""
    try:
        if git.is_file():  # a worktree: "gitdir: <path>"
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head or None
        ref = head[5:]
        common = Path((git / "commondir").read_text().strip()) if (git / "commondir").is_file() else None
        for base in (git, (git / common) if common else None):
            if base is not None and (base / ref).is_file():
                return (base / ref).read_text().strip()
            if base is not None and (base / "packed-refs").is_file():
                for line in (base / "packed-refs").read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split(" ", 1)[0]
    except (OSError, IndexError):
        return None
    return None


def platform_versions(names: tuple[str, ...] = VERSIONED_DISTRIBUTIONS) -> dict[str, str]:
    """{distribution: version} of the installed distributions (importlib.metadata); code run from a git checkout (the
    platform's own projects when this module comes from one, another distribution's editable install) with that
    checkout's commit (`0.1.0+g<commit>`); the platform's projects not installed fall back to the checkout's
    pyproject version. "python" too. Absent ones are left out."""
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
            # The version says nothing of the code a checkout runs: name its commit. The platform's own projects
            # are the checkout this module was imported from (whatever pip says), others their editable folder.
            project = _CHECKOUT_PROJECTS.get(name) if _in_git_checkout(CHECKOUT) else _editable_checkout(name)
            if project is not None:
                versions[name] = _with_commit(versions[name], project)
        except metadata.PackageNotFoundError:
            project = _CHECKOUT_PROJECTS.get(name)
            found = _checkout_version(project) if project is not None else None
            if found:
                versions[name] = found
    return versions


# -- the builder ----------------------------------------------------------------------------------------------------

def _data_version_of(channel: Mapping[str, Any]) -> str | None:
    """A prefetch result's data version: its `key` when the stage gives it, else the cache entry's directory name
    (`<cache>/<key>/data`, operators/cache/data_cache.py CacheEntry.path)."""
    key = channel.get("key") or channel.get("data_version")
    if key:
        return str(key)
    entry = channel.get("entry")
    if entry:
        name = os.path.basename(os.path.dirname(str(entry).rstrip("/")))
        if _CACHE_KEY.match(name):
            return name
    return None


def _outcome(launch: Mapping[str, Any] | None, upload: Mapping[str, Any] | None) -> Outcome:
    launch, upload = dict(launch or {}), dict(upload or {})
    status = "unknown"
    if upload.get("status") in ("succeeded", "failed"):
        status = upload["status"]
    elif "succeeded" in launch:
        status = "succeeded" if launch["succeeded"] else "failed"
    if launch.get("stopped_early"):
        status = "stopped"
    metrics = {str(k): (float(v) if v is not None else None) for k, v in (launch.get("metrics") or {}).items()}
    return Outcome(status=status, failure_class=launch.get("failure_class"), exit_code=launch.get("exit_code"),
                   final_metrics=metrics, model_uri=upload.get("model_uri"))


def build_record(
    job: Mapping[str, Any],
    *,
    dag_id: str,
    run_id: str,
    triggering_user: str | None = None,
    stage_code: Mapping[str, Any] | None = None,
    prefetch: Mapping[str, Mapping[str, Any]] | None = None,
    write_configs: Mapping[str, Any] | None = None,
    restore: Mapping[str, Any] | None = None,
    launch: Mapping[str, Any] | None = None,
    upload: Mapping[str, Any] | None = None,
    code_digest: str | None = None,
    channel_versions: Mapping[str, Mapping[str, Any]] | None = None,
    image_name: str | None = None,
    image_digest: str | None = None,
    parent_lineage_uri: str | None = None,
    reproduces: RunReference | Mapping[str, Any] | None = None,
    versions: Mapping[str, str] | None = None,
    created_at: datetime | None = None,
) -> LineageRecord:
    """The record of one run, from the validated spec dict `job` and the stages' result dicts (each as its stage
    returns it today: stage_code {code_dir, files, bytes}, prefetch_data {channel: {entry, is_file, uri, file_name}},
    write_configs {hosts, config_dir}, restore {checkpoint_files, resumed_from}, launch_training {succeeded,
    exit_code, metrics, failure_class}, upload_artifacts {status, model_uri, artifacts}); a missing result leaves its
    part empty (a run that failed early).

    The engine's stage_code result carries `code_digest` and prefetch_data's channels their `data_version`, `files`
    and `bytes` (operators/engine/results.py); the arguments override them: `code_digest` (code_digest.code_digest of
    the staged code_dir), `channel_versions` ({channel: {data_version, objects, bytes}}: the cache entry's key, files
    and bytes), `image_name` (default: the spec's image_uri) and
    `image_digest` (what the backend ran), `parent_lineage_uri` (default: lineage.json beside the resolved parent
    model), `reproduces` (default: the spec's `reproduces` reference, for a reproduction), and `versions` (default: platform_versions())."""
    spec = JobSpec.from_dict(job)
    code = dict(stage_code or {})
    archive = _SDK_ARCHIVE.search(spec.source_dir)
    code_part = CodeLineage(source_uri=spec.source_dir, digest=code_digest or code.get("code_digest"),
                            files=code.get("files"),
                            bytes=code.get("bytes"), archive_sha256=archive.group(1) if archive else None)

    prefetched = {name: dict(value) for name, value in (prefetch or {}).items() if isinstance(value, Mapping)}
    given = {name: dict(value) for name, value in (channel_versions or {}).items()}
    channels = {}
    for name, uri in spec.inputs.items():
        found, extra = prefetched.get(name, {}), given.get(name, {})
        channels[name] = ChannelLineage(
            uri=str(found.get("uri") or uri),
            data_version=extra.get("data_version") or _data_version_of(found),
            objects=extra.get("objects", found.get("files")),
            bytes=extra.get("bytes", found.get("bytes")))

    resources = ResourcesLineage(instance_count=spec.instance_count, cpu=spec.resources.cpu,
                                 memory=spec.resources.memory, gpu=spec.resources.gpu, disk=spec.resources.disk,
                                 hosts=[str(h) for h in (write_configs or {}).get("hosts") or []])

    parent = None
    if spec.resume_from:
        resolved = (restore or {}).get("resumed_from")
        if resolved is None and spec.resume_from != "latest" and restore is None:
            resolved = spec.resume_from  # no restore result (yet): the spec's own URI is what it resolves to
        parent = ParentModel(requested=spec.resume_from, model_uri=resolved,
                             lineage_uri=parent_lineage_uri or lineage_uri_beside(resolved))

    if reproduces is None and spec.reproduces is not None:  # a reproduction names the run it reproduces
        reproduces = RunReference(job_name=spec.reproduces.job_name, dag_id=spec.reproduces.dag_id,
                                  run_id=spec.reproduces.run_id, lineage_uri=spec.reproduces.lineage_uri)
    if reproduces is not None and not isinstance(reproduces, RunReference):
        reproduces = RunReference.model_validate(dict(reproduces))

    when = created_at or datetime.now(timezone.utc)
    return LineageRecord(
        job_name=spec.job_name,
        base_job_name=spec.base_job_name,
        created_at=when.astimezone(timezone.utc).isoformat(),
        airflow=AirflowRun(dag_id=dag_id, run_id=run_id, owner=job.get(OWNER_KEY), triggering_user=triggering_user),
        code=code_part,
        channels=channels,
        hyperparameters=dict(spec.hyperparameters),
        image=ImageLineage(backend=spec.backend, name=None if spec.backend == "local" else image_name or spec.image_uri,
                           digest=image_digest),
        resources=resources,
        parent=parent,
        outcome=_outcome(launch, upload),
        versions=dict(versions) if versions is not None else platform_versions(),
        reproduces=reproduces,
        published_uri=published_uri(spec),
    )


def record_summary(record: LineageRecord) -> str:
    """One line for a task log: what made this run's model."""
    data = ", ".join(f"{name}@{(version or '?')[:12]}" for name, version in sorted(record.data_versions.items()))
    return (f"lineage of {record.job_name}: code {record.code.digest or '?'}; data {data or 'none'}; image "
            f"{record.image.name or '-'}@{record.image.digest or '?'}; parent "
            f"{record.parent.model_uri if record.parent else 'none'}")


def record_dict(record: LineageRecord) -> dict[str, Any]:
    """The record as the JSON document's dict (for XCom and the console)."""
    return json.loads(record.to_json())


__all__ = [
    "LINEAGE_CARRIED", "LINEAGE_FILE", "SCHEMA_VERSION", "AirflowRun", "ChannelLineage", "CodeLineage", "ImageLineage", "LineageError",
    "LineageRecord", "Outcome", "ParentModel", "ResourcesLineage", "RunReference", "build_record", "carried_record",
    "keep_carried", "kept_sha256", "lineage_uri_beside", "platform_versions", "publish_record", "published_uri", "read_record",
    "record_dict", "record_path", "record_summary", "write_record",
]

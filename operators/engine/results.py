"""Each stage's typed result. to_dict() is exactly the XCom dict the stage has always returned (the pipelines, the
console, the SDK and the data-plane step's outcome read those keys); from_dict() reads one back, so a result
round-trips through JSON: from_dict(json.loads(json.dumps(r.to_dict()))) == r. read_result() reads one back without
ever raising, for the readers of what any release recorded (the console)."""

from __future__ import annotations

from collections import abc
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cache
from types import UnionType
from typing import Any, Mapping, TypeVar, Union, get_args, get_origin, get_type_hints


@dataclass(frozen=True)
class StagedCode:
    """code_digest: the digest of the staged tree (operators/lineage/code_digest.py), what the run's lineage names;
    None when it could not be computed."""

    code_dir: str
    files: int
    bytes: int
    code_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code_dir": self.code_dir, "files": self.files, "bytes": self.bytes, "code_digest": self.code_digest}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StagedCode:
        return cls(str(data["code_dir"]), int(data["files"]), int(data["bytes"]), data.get("code_digest"))


@dataclass(frozen=True)
class StagedChannel:
    """One input channel: its cache entry (a path in the workspace), whether it is one file (and its name), its URI;
    and what the run's lineage names: the data version (the cache entry's key: a digest of the channel's listing,
    operators/cache/data_cache.py), its object count and bytes."""

    entry: str
    is_file: bool
    uri: str
    file_name: str | None = None
    data_version: str | None = None
    files: int | None = None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry, "is_file": self.is_file, "uri": self.uri, "file_name": self.file_name,
                "data_version": self.data_version, "files": self.files, "bytes": self.bytes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StagedChannel:
        return cls(str(data["entry"]), bool(data["is_file"]), str(data["uri"]), data.get("file_name"),
                   data.get("data_version"), data.get("files"), data.get("bytes"))


@dataclass(frozen=True)
class StagedChannels:
    """channel name -> StagedChannel; the XCom is the plain mapping of channel name to its dict."""

    channels: Mapping[str, StagedChannel] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {name: channel.to_dict() for name, channel in self.channels.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> StagedChannels:
        return cls({name: StagedChannel.from_dict(info) for name, info in (data or {}).items()})


@dataclass(frozen=True)
class WrittenConfigs:
    hosts: tuple[str, ...]
    config_dir: str

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "config_dir": self.config_dir}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WrittenConfigs:
        return cls(tuple(data["hosts"]), str(data["config_dir"]))


@dataclass(frozen=True)
class Restored:
    checkpoint_files: int = 0
    resumed_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint_files": self.checkpoint_files, "resumed_from": self.resumed_from}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Restored:
        return cls(int(data.get("checkpoint_files") or 0), data.get("resumed_from"))


@dataclass(frozen=True)
class UploadedArtifacts:
    """status "succeeded" (model_uri set) or "failed" (failure: the end of the job's reason); artifacts: name -> URI
    of what is in the job's output (operators/job_outputs.py); lineage_uri: the run's published lineage record
    (operators/lineage/record.py), None when none could be built; lineage_sha256: the sha256 of the document published
    there, by which a worker that cannot read the kept copy (the cluster's data plane) trusts the published one."""

    status: str
    artifacts: Mapping[str, str] = field(default_factory=dict)
    model_uri: str | None = None
    failure: str | None = None
    lineage_uri: str | None = None
    lineage_sha256: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def to_dict(self) -> dict[str, Any]:
        data = {"status": self.status, "model_uri": self.model_uri, "artifacts": dict(self.artifacts),
                "lineage_uri": self.lineage_uri, "lineage_sha256": self.lineage_sha256}
        if not self.succeeded:
            data["failure"] = self.failure
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UploadedArtifacts:
        return cls(str(data["status"]), dict(data.get("artifacts") or {}), data.get("model_uri"), data.get("failure"),
                   data.get("lineage_uri"), data.get("lineage_sha256"))


@dataclass(frozen=True)
class LaunchSummary:
    """The training's outcome as the launch stage returns it (and records as "outcome" when it fails): restarts only
    for an elastic job whose hosts were started again; image_digest: the image the backend ran (LaunchResult's: the
    run's lineage records it), None where none ran."""

    succeeded: bool
    exit_code: int | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    failure_class: str | None = None
    restarts: Mapping[str, int] = field(default_factory=dict)
    image_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"succeeded": self.succeeded, "exit_code": self.exit_code, "metrics": dict(self.metrics),
                "failure_class": self.failure_class, "image_digest": self.image_digest}
        if self.restarts:
            data["restarts"] = dict(self.restarts)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchSummary:
        return cls(bool(data["succeeded"]), data.get("exit_code"), dict(data.get("metrics") or {}),
                   data.get("failure_class"), dict(data.get("restarts") or {}), data.get("image_digest"))


R = TypeVar("R")


# -- reading what a run recorded ------------------------------------------------------------------------------------
# The readers of a run's XComs (the console) meet what any release wrote: an older release's result lacks a field this
# one added, a hand-edited or broken XCom has a field of another type. They read it with read_result, which never
# raises: the fields it can read, and for the rest the field's default (a required one: its type's empty value).

def read_result(cls: type[R], value: Any) -> R | None:
    """`value` (a decoded XCom) as `cls`; None when it is not a mapping. A well-formed result reads as from_dict reads
    it; a field missing or not of its type takes its default instead of failing the whole result."""
    if not isinstance(value, Mapping):
        return None
    if cls is StagedChannels:  # its XCom is the plain mapping of channel name to channel
        channels = {name: read_result(StagedChannel, info) for name, info in value.items()}
        return cls({name: channel for name, channel in channels.items() if channel is not None})  # type: ignore[return-value]
    return cls(**{f.name: _field_value(value.get(f.name, MISSING), hint, f) for f, hint in _typed_fields(cls)})


@cache
def _typed_fields(cls: type) -> tuple[tuple[Field, Any], ...]:
    """Each field of `cls` with its type, resolved once (the console reads thousands of results per list)."""
    hints = get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in fields(cls))


def _field_value(value: Any, hint: Any, spec: Field) -> Any:
    read = _as_type(value, hint)
    if read is not MISSING:
        return read
    if spec.default is not MISSING:
        return spec.default
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return _empty(hint)


def _as_type(value: Any, hint: Any) -> Any:
    """`value` as `hint` (the types of this module's fields), or MISSING when it is not one."""
    if value is MISSING:
        return MISSING
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        if value is None and type(None) in args:
            return None
        return next((read for read in (_as_type(value, arg) for arg in args if arg is not type(None))
                     if read is not MISSING), MISSING)
    if origin is abc.Mapping:
        return dict(value) if isinstance(value, Mapping) else MISSING
    if origin is tuple:
        return tuple(value) if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value) else MISSING
    if hint is bool:
        return value if isinstance(value, bool) else MISSING
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else MISSING
    if hint is str:
        return value if isinstance(value, str) else MISSING
    return MISSING


def _empty(hint: Any) -> Any:
    return {str: "", int: 0, bool: False}.get(hint, ())

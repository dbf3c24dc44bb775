"""Where objects live: URIs (s3:// cos:// oss:// obs://, file:// and plain local paths) and what listings return.

Pure data and parsing, no I/O: `parse_uri`, `StorageLocation`, `ObjectInfo`, `ObjectListing`, `TransferStats`,
and the key checks that keep a listed object from mapping onto a path outside its destination.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from operators.storage.errors import StorageError

# The one scheme -> default Airflow connection table: every remote scheme is an S3-compatible store; spec
# validation, the trigger form, the preflight checks and the stores all read it from here.
DEFAULT_CONNECTIONS: dict[str, str] = {
    "s3": "aws_default",
    "cos": "cos_default",
    "oss": "oss_default",
    "obs": "obs_default",
}
REMOTE_SCHEMES: tuple[str, ...] = tuple(DEFAULT_CONNECTIONS)


def connection_env_name(conn_id: str) -> str:
    """The environment variable Airflow reads connection `conn_id` from (AIRFLOW_CONN_<ID>)."""
    return "AIRFLOW_CONN_" + re.sub(r"[^A-Za-z0-9]", "_", conn_id).upper()

LOCAL_SCHEME = "file"
SCHEME_HINT = ", ".join(f"{scheme}://" for scheme in REMOTE_SCHEMES)  # "s3://, cos://, oss://, obs://"

_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_MD5_ETAG_RE = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class StorageLocation:
    scheme: str  # s3 | cos | oss | obs | file
    bucket: str  # "" for local paths
    key: str  # object key or prefix ("" = whole bucket); "" for local paths
    local_path: str | None = None  # absolute path for local locations

    @property
    def is_local(self) -> bool:
        return self.scheme == LOCAL_SCHEME

    @property
    def uri(self) -> str:
        if self.is_local:
            return f"file://{self.local_path}"
        return f"{self.scheme}://{self.bucket}/{self.key}"

    def __str__(self) -> str:
        return self.local_path if self.is_local else self.uri  # type: ignore[return-value]

    def child(self, relative_path: str) -> StorageLocation:
        """The location of `relative_path` under this prefix / directory."""
        if self.is_local:
            return StorageLocation(LOCAL_SCHEME, "", "", os.path.join(self.local_path or "", relative_path))
        base = self.key if (not self.key or self.key.endswith("/")) else self.key + "/"
        return StorageLocation(self.scheme, self.bucket, base + relative_path)


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # full object key (absolute file path for local files)
    relative_path: str  # path below the listed prefix; the base name for a single object
    size: int
    etag: str  # ETag without quotes, lower case; for local files a change stamp (mtime, size, inode)
    last_modified: float = 0.0  # seconds since the epoch (LastModified of the object, mtime of a file)


@dataclass(frozen=True)
class ObjectListing:
    """What one listing found: a prefix (zero or more objects) or a single object."""

    location: StorageLocation
    is_prefix: bool
    objects: tuple[ObjectInfo, ...]

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    @property
    def normalized_uri(self) -> str:
        """The same string for s3://b/data and s3://b/data/ when both mean the prefix."""
        loc = self.location
        if loc.is_local:
            return f"file://{os.path.normpath(loc.local_path or '/')}"
        key = loc.key
        if self.is_prefix and key and not key.endswith("/"):
            key += "/"
        return f"{loc.scheme}://{loc.bucket}/{key}"


@dataclass(frozen=True)
class TransferStats:
    files: int
    bytes: int
    seconds: float = 0.0


def _storage_error_for_key(uri: str, key: str, why: str) -> StorageError:
    return StorageError(
        f"refusing object key {key!r} under {uri}: {why}, so it could be written outside the destination; "
        "rename the object"
    )


def check_key(key: str, uri: str, *, allow_trailing_slash: bool = True, full_key: str | None = None) -> None:
    """Refuse keys that would not map 1:1 onto a path below the destination ('..', '.', '//', leading '/')."""
    if not key:
        return
    shown = full_key or key
    if key.startswith("/"):
        raise _storage_error_for_key(uri, shown, "it starts with '/'")
    parts = key.split("/")
    if allow_trailing_slash and parts[-1] == "":
        parts = parts[:-1]
    for part in parts:
        if part == "..":
            raise _storage_error_for_key(uri, shown, "it contains a '..' path segment")
        if part == ".":
            raise _storage_error_for_key(uri, shown, "it contains a '.' path segment")
        if part == "":
            raise _storage_error_for_key(uri, shown, "it contains an empty path segment ('//')")
        if "\x00" in part:
            raise _storage_error_for_key(uri, shown, "it contains a NUL character")


def parse_uri(uri: str) -> StorageLocation:
    """Parse s3:// cos:// oss:// obs:// URIs, file:// URIs and plain local paths.

    Object keys containing a `..` (or `.`, or empty) path segment are refused: they would escape the
    destination directory when mapped onto a file system.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise StorageError(f"empty storage URI {uri!r}; give an object storage URI ({SCHEME_HINT}, e.g. "
                           "s3://bucket/prefix) or a local path")
    uri = uri.strip()
    if "://" not in uri:
        return StorageLocation(LOCAL_SCHEME, "", "", os.path.abspath(os.path.expanduser(uri)))
    scheme, _, rest = uri.partition("://")
    scheme = scheme.lower()
    if scheme == LOCAL_SCHEME:
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"file URI {uri} names host {parts.netloc!r}; use file:///absolute/path")
        path = unquote(parts.path)
        if not path:
            raise StorageError(f"file URI {uri} has no path; use file:///absolute/path")
        return StorageLocation(LOCAL_SCHEME, "", "", os.path.abspath(path))
    if scheme not in DEFAULT_CONNECTIONS:
        raise StorageError(
            f"unsupported storage scheme {scheme!r} in {uri}; use {SCHEME_HINT}, file:// or a local path"
        )
    bucket, _, key = rest.partition("/")
    if not bucket or not _BUCKET_RE.match(bucket):
        raise StorageError(f"invalid bucket name {bucket!r} in {uri}; expected {scheme}://bucket/key")
    check_key(key, uri)
    return StorageLocation(scheme, bucket, key)


def normalize_etag(etag: str | None) -> str:
    return (etag or "").strip().strip('"').lower()


def is_md5_etag(etag: str) -> bool:
    return bool(_MD5_ETAG_RE.match(etag))


def timestamp(value: Any) -> float:
    return value.timestamp() if hasattr(value, "timestamp") else float(value or 0.0)


def local_stamp(st: os.stat_result) -> str:
    # Local files have no ETag; this stamp changes whenever the file is rewritten or replaced.
    return f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}"


def check_no_file_dir_clash(objects: list[ObjectInfo], uri: str) -> None:
    """'a' and 'a/b' cannot both exist on a file system; say which keys clash instead of failing mid-way."""
    files = {o.relative_path: o.key for o in objects}
    for o in objects:
        parts = o.relative_path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in files:
                raise StorageError(
                    f"objects {files[parent]!r} and {o.key!r} under {uri} clash: one is a file and the other needs "
                    "a directory of the same name; rename one of them"
                )


__all__ = [
    "DEFAULT_CONNECTIONS",
    "LOCAL_SCHEME",
    "REMOTE_SCHEMES",
    "SCHEME_HINT",
    "ObjectInfo",
    "ObjectListing",
    "StorageLocation",
    "TransferStats",
    "check_key",
    "check_no_file_dir_clash",
    "is_md5_etag",
    "local_stamp",
    "normalize_etag",
    "parse_uri",
    "timestamp",
]

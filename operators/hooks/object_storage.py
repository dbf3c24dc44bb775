"""Object storage for training jobs: s3://, cos://, oss://, obs:// URIs and local paths behind one hook.

Every scheme is S3-compatible and resolves to an Airflow connection of type aws (defaults below; a job
may name another with `connections={"cos": "my_cos"}`). Credentials and the boto3 session come from the
amazon provider's AwsBaseHook, so everything Airflow supports for AWS connections works (login/password,
profiles, assume-role, AIRFLOW_CONN_<ID> environment variables, secrets backends). The connection extra
carries `endpoint_url`, `region_name` (or `region`) and `addressing_style` ("path" / "virtual"); a
`config_kwargs` dict in the extra is merged over our botocore defaults.

Transfers go through s3transfer's TransferManager (parallel across objects, ranged/multipart within large
ones, botocore's "standard" retry mode): no hand-written signing, retries or multipart. What lands is
verified: size always, and MD5 where the ETag is a plain MD5 (single-part uploads). Files are written
under a temporary name and renamed, uploads become visible only when complete (S3 PutObject and
CompleteMultipartUpload are atomic; local copies use temp + rename).

Local paths (plain or file://) work with every method, so a job can read from and write to a shared
file system exactly as it does with a bucket.

Errors are `StorageError`: one line naming the action, the URI, the connection id and what to do; never
a secret and never a stack of botocore internals (the original exception is logged at DEBUG).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping
from urllib.parse import unquote, urlsplit

from operators.hooks.transfer_progress import DEFAULT_INTERVAL_SECONDS, TransferProgress

if TYPE_CHECKING:
    from operators.settings import TrainingSettings

log = logging.getLogger(__name__)

DEFAULT_CONNECTIONS: dict[str, str] = {
    "s3": "aws_default",
    "cos": "cos_default",
    "oss": "oss_default",
    "obs": "obs_default",
}
LOCAL_SCHEME = "file"

_AWS_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_MD5_ETAG_RE = re.compile(r"^[0-9a-f]{32}$")
_IO_CHUNK = 1024 * 1024

# botocore defaults that keep an unreachable endpoint from hanging a task for minutes while still riding
# out a flaky network (standard mode: 3 attempts with jittered exponential backoff).
_CONNECT_TIMEOUT_S = 10
_READ_TIMEOUT_S = 60
_MAX_ATTEMPTS = 3


class StorageError(Exception):
    """A storage operation failed; str() is one line saying what, where (URI, connection) and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


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


def _check_key(key: str, uri: str, *, allow_trailing_slash: bool = True, full_key: str | None = None) -> None:
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
        raise StorageError(f"empty storage URI {uri!r}; give s3://bucket/prefix, cos://..., or a local path")
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
            f"unsupported storage scheme {scheme!r} in {uri}; use s3://, cos://, oss://, obs://, file:// or a local path"
        )
    bucket, _, key = rest.partition("/")
    if not bucket or not _BUCKET_RE.match(bucket):
        raise StorageError(f"invalid bucket name {bucket!r} in {uri}; expected {scheme}://bucket/key")
    _check_key(key, uri)
    return StorageLocation(scheme, bucket, key)


def _normalize_etag(etag: str | None) -> str:
    return (etag or "").strip().strip('"').lower()


def _is_md5_etag(etag: str) -> bool:
    return bool(_MD5_ETAG_RE.match(etag))


def _timestamp(value: Any) -> float:
    return value.timestamp() if hasattr(value, "timestamp") else float(value or 0.0)


def _md5_file(path: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(_IO_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _local_stamp(st: os.stat_result) -> str:
    # Local files have no ETag; this stamp changes whenever the file is rewritten or replaced.
    return f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}"


def _temp_name(final_path: str) -> str:
    """A sibling temp name (same directory => same file system => os.replace is atomic)."""
    directory, name = os.path.split(final_path)
    return os.path.join(directory, f".{name}.part-{os.urandom(4).hex()}")


def _display_endpoint(endpoint: str | None) -> str:
    if not endpoint:
        return "default AWS endpoint"
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return f"{parts.scheme}://{host}" if parts.scheme else endpoint  # drop any user:password@


def _is_aws_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return True
    host = (urlsplit(endpoint).hostname or "").lower()
    return host.endswith(_AWS_HOST_SUFFIXES)


@dataclass
class _Remote:
    """A ready boto3 S3 client for one connection, and what error messages need to say about it."""

    client: Any
    conn_id: str
    endpoint: str | None
    is_aws: bool = True


# ---------------------------------------------------------------------------------------------------------------
# error translation


_AUTH_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
}
_DENIED_CODES = {"AccessDenied", "AllAccessDisabled", "Forbidden", "403"}
_NO_OBJECT_CODES = {"NoSuchKey", "404", "NotFound"}
_REGION_CODES = {"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException", "301"}


def _translate_error(err: BaseException, action: str, uri: str, remote: _Remote | None) -> StorageError:
    """Map botocore/s3transfer/OS errors to one actionable line; never includes credentials."""
    import botocore.exceptions as bx
    from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError

    if isinstance(err, StorageError):
        return err
    if isinstance(err, RetriesExceededError) and err.last_exception is not None:
        err = err.last_exception
    if remote is None:  # local file system
        if isinstance(err, OSError):
            what = err.strerror or type(err).__name__
            name = err.filename or uri
            return StorageError(f"cannot {action} {uri}: {what} ({name}); check the path and its permissions")
        return StorageError(f"cannot {action} {uri}: {type(err).__name__}: {err}")

    via = f"via connection '{remote.conn_id}'"
    endpoint = _display_endpoint(remote.endpoint)
    if isinstance(err, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ProxyConnectionError)):
        text = f"{err} {getattr(err, 'kwargs', {}).get('error', '')} {err.__context__ or ''}".lower()
        reason = "connection refused" if "refused" in text else "timed out" if "timeout" in text or "timed out" in text else "connection failed"
        if isinstance(err, bx.ConnectTimeoutError):
            reason = "connect timed out"
        return StorageError(
            f"cannot reach {uri} {via} (endpoint {endpoint}): {reason}; "
            "check the endpoint_url in the connection's extra and that the service is reachable"
        )
    if isinstance(err, bx.SSLError):
        return StorageError(
            f"cannot reach {uri} {via} (endpoint {endpoint}): TLS error; "
            "check the endpoint_url scheme (http/https) and the connection's 'verify' extra"
        )
    if isinstance(err, (bx.ReadTimeoutError, bx.ConnectionClosedError, bx.ResponseStreamingError)):
        return StorageError(
            f"cannot {action} {uri} {via} (endpoint {endpoint}): the connection was interrupted "
            f"({type(err).__name__}) after retries; retry the task, or check the network to the endpoint"
        )
    if isinstance(err, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return StorageError(
            f"no credentials to {action} {uri} {via}; set the login (access key id) and password (secret key) "
            f"of connection '{remote.conn_id}'"
        )
    if isinstance(err, S3DownloadFailedError) and "ETag" in str(err):
        return StorageError(f"{uri} changed while it was being downloaded {via}; retry the task")
    if isinstance(err, bx.ClientError):
        error = err.response.get("Error", {}) or {}
        code = str(error.get("Code") or "")
        status = (err.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        bucket = error.get("BucketName") or ""
        if code in _AUTH_CODES:
            return StorageError(
                f"access denied to {uri} {via} (endpoint {endpoint}): {code}; "
                f"check the credentials (login/password) of connection '{remote.conn_id}'"
            )
        if code in _DENIED_CODES or status == 403:
            return StorageError(
                f"access denied to {uri} {via} ({code or 'HTTP 403'}); check that the credentials of connection "
                f"'{remote.conn_id}' may {action} this bucket/prefix"
            )
        if code == "NoSuchBucket":
            return StorageError(
                f"no such bucket {bucket or uri.split('/')[2]!r} for {uri} {via} (endpoint {endpoint}); "
                "check the bucket name and the connection's endpoint_url / region"
            )
        if code in _NO_OBJECT_CODES or status == 404:
            return StorageError(f"no such object {uri} {via}; check the URI")
        if code in ("PreconditionFailed", "412") or status == 412:
            return StorageError(f"{uri} changed while it was being downloaded {via}; retry the task")
        if code in _REGION_CODES or status == 301:
            return StorageError(
                f"cannot {action} {uri} {via}: wrong region or endpoint ({code}); "
                "check region_name / endpoint_url in the connection's extra"
            )
        message = str(error.get("Message") or "").split("\n")[0][:200]
        return StorageError(
            f"cannot {action} {uri} {via} (endpoint {endpoint}): {code or 'error'} (HTTP {status})"
            f"{': ' + message if message else ''}; check the URI and the connection"
        )
    if isinstance(err, bx.BotoCoreError):
        return StorageError(f"cannot {action} {uri} {via} (endpoint {endpoint}): {type(err).__name__}: {err}")
    if isinstance(err, OSError):
        return StorageError(
            f"cannot {action} {uri} {via}: local file error: {err.strerror or err} ({err.filename or ''}); "
            "check the destination path, free space and permissions"
        )
    return StorageError(f"cannot {action} {uri} {via}: {type(err).__name__}: {err}")


# ---------------------------------------------------------------------------------------------------------------
# s3transfer subscribers


def _subscriber_classes():
    from s3transfer.subscribers import BaseSubscriber

    class KnownObject(BaseSubscriber):
        """Hands the listed size and ETag to s3transfer: no HEAD per object, and ranged GETs use If-Match."""

        def __init__(self, size: int, etag: str | None) -> None:
            self._size = size
            self._etag = etag

        def on_queued(self, future, **kwargs):
            future.meta.provide_transfer_size(self._size)
            if self._etag:
                future.meta.provide_object_etag(f'"{self._etag}"')

    class Progress(BaseSubscriber):
        def __init__(self, progress: TransferProgress) -> None:
            self._progress = progress

        def on_progress(self, future, bytes_transferred, **kwargs):
            self._progress.add_bytes(bytes_transferred)

    class OnDone(BaseSubscriber):
        def __init__(self, callback) -> None:
            self._callback = callback

        def on_done(self, future, **kwargs):
            self._callback(future)

    return KnownObject, Progress, OnDone


# ---------------------------------------------------------------------------------------------------------------
# the hook


class ObjectStorageHook:
    """All object-storage I/O of the pipeline (code staging, data prefetch, output upload).

    :param connections: scheme -> Airflow connection id overrides, e.g. {"cos": "my_cos"}.
    :param settings: transfer settings (concurrency, multipart threshold/chunk size); default: airflow.cfg.
    :param progress_interval: seconds between progress lines of a long transfer.
    """

    def __init__(
        self,
        connections: Mapping[str, str] | None = None,
        settings: TrainingSettings | None = None,
        *,
        progress_interval: float = DEFAULT_INTERVAL_SECONDS,
    ) -> None:
        overrides = dict(connections or {})
        for scheme, conn_id in overrides.items():
            if scheme not in DEFAULT_CONNECTIONS:
                raise StorageError(
                    f"connections: unknown scheme {scheme!r}; use one of {', '.join(sorted(DEFAULT_CONNECTIONS))}"
                )
            if not isinstance(conn_id, str) or not conn_id.strip():
                raise StorageError(f"connections: the connection id for {scheme!r} must be a non-empty string")
        self._connections = {**DEFAULT_CONNECTIONS, **{k: v.strip() for k, v in overrides.items()}}
        self._settings = settings
        self.progress_interval = progress_interval
        self._remotes: dict[str, _Remote] = {}
        self._remotes_lock = threading.Lock()

    # -- configuration ------------------------------------------------------------------------------------------

    @property
    def settings(self) -> TrainingSettings:
        if self._settings is None:
            from operators.settings import training_settings

            self._settings = training_settings()
        return self._settings

    @property
    def concurrency(self) -> int:
        return max(1, int(self.settings.transfer_concurrency))

    def connection_id(self, scheme_or_uri: str) -> str | None:
        """The Airflow connection id used for a scheme ("cos") or URI; None for local paths."""
        if scheme_or_uri in self._connections:
            return self._connections[scheme_or_uri]
        return self._connections.get(parse_uri(scheme_or_uri).scheme)

    def _transfer_config(self):
        from s3transfer.manager import TransferConfig

        return TransferConfig(
            multipart_threshold=max(1, int(self.settings.multipart_threshold)),
            multipart_chunksize=max(1, int(self.settings.multipart_chunksize)),
            max_request_concurrency=self.concurrency,
        )

    def _remote(self, loc: StorageLocation) -> _Remote:
        conn_id = self._connections[loc.scheme]
        with self._remotes_lock:
            remote = self._remotes.get(conn_id)
            if remote is None:
                remote = self._make_remote(loc, conn_id)
                self._remotes[conn_id] = remote
            return remote

    def _make_remote(self, loc: StorageLocation, conn_id: str) -> _Remote:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
        from botocore.config import Config

        aws = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
        try:
            wrapper = aws.conn_config
        except Exception as err:  # noqa: BLE001 - a malformed connection; its text may hold the secret
            log.debug("reading connection %r failed: %s", conn_id, type(err).__name__)
            raise StorageError(
                f"cannot read Airflow connection '{conn_id}' for {loc.uri} ({type(err).__name__}); "
                "check that it is a valid connection of type aws"
            ) from None
        if not wrapper and not (loc.scheme == "s3" and conn_id == DEFAULT_CONNECTIONS["s3"]):
            # Only plain s3:// with the default id may fall back to boto3's own credential chain (instance
            # roles, env vars); for cos/oss/obs or a named connection there is no sane default endpoint.
            env_name = "AIRFLOW_CONN_" + re.sub(r"[^A-Za-z0-9]", "_", conn_id).upper()
            raise StorageError(
                f"connection '{conn_id}' for {loc.uri} is not defined; create an Airflow connection of type aws "
                f"(or set {env_name}) with login/password and extra endpoint_url, region_name, addressing_style"
            )
        extra = dict(wrapper.extra_config or {}) if wrapper else {}
        endpoint = wrapper.get_service_endpoint_url("s3") if wrapper else None
        region = (wrapper.region_name if wrapper else None) or extra.get("region") or None
        if loc.scheme != "s3" and not endpoint:
            raise StorageError(
                f"connection '{conn_id}' for {loc.uri} has no endpoint_url in its extra; set the {loc.scheme.upper()} "
                "endpoint (e.g. https://cos.<region>.myqcloud.com, https://oss-<region>.aliyuncs.com, "
                "https://obs.<region>.myhuaweicloud.com)"
            )
        is_aws = _is_aws_endpoint(endpoint)

        config = Config(
            retries={"mode": "standard", "max_attempts": _MAX_ATTEMPTS},
            max_pool_connections=max(10, self.concurrency + 4),
            connect_timeout=_CONNECT_TIMEOUT_S,
            read_timeout=_READ_TIMEOUT_S,
            tcp_keepalive=True,
        )
        addressing_style = extra.get("addressing_style") or (extra.get("s3") or {}).get("addressing_style")
        if addressing_style:
            config = config.merge(Config(s3={"addressing_style": addressing_style}))
        if not is_aws:
            # boto3 >= 1.36 sends CRC checksums / aws-chunked bodies by default, which many S3-compatible stores
            # reject; we verify size and MD5/ETag ourselves instead.
            config = config.merge(
                Config(request_checksum_calculation="when_required", response_checksum_validation="when_required")
            )
        if wrapper and wrapper.botocore_config is not None:
            config = config.merge(wrapper.botocore_config)  # the connection's config_kwargs win
        try:
            client = aws.get_client_type(region_name=region, config=config)
        except ValueError as err:  # bad endpoint_url / region strings
            raise StorageError(
                f"cannot use connection '{conn_id}' for {loc.uri}: {err}; check endpoint_url and region_name in its extra"
            ) from None
        log.debug(
            "object storage client for connection %r: endpoint %s, region %s, addressing %s, aws=%s",
            conn_id,
            _display_endpoint(endpoint),
            region,
            addressing_style or "auto",
            is_aws,
        )
        return _Remote(client=client, conn_id=conn_id, endpoint=endpoint, is_aws=is_aws)

    @contextmanager
    def _errors(self, action: str, uri: str, remote: _Remote | None) -> Iterator[None]:
        try:
            yield
        except StorageError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure becomes one actionable line
            log.debug("%s %s failed", action, uri, exc_info=True)
            raise _translate_error(err, action, uri, remote) from None

    # -- listing ------------------------------------------------------------------------------------------------

    def describe(self, uri: str) -> ObjectListing:
        """List what `uri` names: the objects under a prefix (recursively), or one object.

        A URI ending in '/' (or naming a bucket root / local directory) is a prefix. Otherwise it is a
        prefix if objects exist under `key/`, else the single object `key` if it exists, else an empty
        prefix. A warm cache check costs exactly these LIST requests and no object bytes.
        """
        loc = parse_uri(uri)
        if loc.is_local:
            return self._describe_local(loc)
        remote = self._remote(loc)
        with self._errors("list", loc.uri, remote):
            if not loc.key or loc.key.endswith("/"):
                return ObjectListing(loc, True, tuple(self._list_prefix(remote, loc, loc.key)))
            objects = self._list_prefix(remote, loc, loc.key + "/")
            if objects:
                return ObjectListing(loc, True, tuple(objects))
            # The exact key sorts first among keys sharing its prefix, so one key is enough to find it.
            response = remote.client.list_objects_v2(Bucket=loc.bucket, Prefix=loc.key, MaxKeys=1)
            for item in response.get("Contents", []) or []:
                if item["Key"] == loc.key:
                    info = ObjectInfo(
                        key=loc.key,
                        relative_path=loc.key.rsplit("/", 1)[-1],
                        size=int(item["Size"]),
                        etag=_normalize_etag(item.get("ETag")),
                        last_modified=_timestamp(item.get("LastModified")),
                    )
                    return ObjectListing(loc, False, (info,))
            return ObjectListing(loc, True, ())

    def _list_prefix(self, remote: _Remote, loc: StorageLocation, prefix: str) -> list[ObjectInfo]:
        paginator = remote.client.get_paginator("list_objects_v2")
        objects: list[ObjectInfo] = []
        for page in paginator.paginate(Bucket=loc.bucket, Prefix=prefix):
            for item in page.get("Contents", []) or []:
                key = item["Key"]
                if key.endswith("/"):
                    continue  # "directory marker" objects created by consoles; nothing to download
                relative = key[len(prefix) :]
                _check_key(relative, loc.uri, allow_trailing_slash=False, full_key=key)
                objects.append(
                    ObjectInfo(
                        key=key,
                        relative_path=relative,
                        size=int(item["Size"]),
                        etag=_normalize_etag(item.get("ETag")),
                        last_modified=_timestamp(item.get("LastModified")),
                    )
                )
        _check_no_file_dir_clash(objects, loc.uri)
        return objects

    def _describe_local(self, loc: StorageLocation) -> ObjectListing:
        path = loc.local_path or ""
        with self._errors("list", path, None):
            if os.path.isfile(path):
                st = os.stat(path)
                info = ObjectInfo(path, os.path.basename(path), st.st_size, _local_stamp(st), st.st_mtime)
                return ObjectListing(loc, False, (info,))
            if not os.path.isdir(path):
                return ObjectListing(loc, True, ())
            objects: list[ObjectInfo] = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                # Symlinked directories are not followed (loops, escapes); symlinked files are read through.
                dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
                for name in sorted(files):
                    full = os.path.join(root, name)
                    try:
                        st = os.stat(full)
                    except FileNotFoundError:
                        log.warning("skipping dangling symlink %s", full)
                        continue
                    if not os.path.isfile(full):
                        log.warning("skipping %s: not a regular file", full)
                        continue
                    rel = os.path.relpath(full, path).replace(os.sep, "/")
                    objects.append(ObjectInfo(full, rel, st.st_size, _local_stamp(st), st.st_mtime))
            return ObjectListing(loc, True, tuple(objects))

    def list_objects(self, uri: str) -> list[ObjectInfo]:
        """The objects under a prefix, or the single object `uri` names ([] when nothing is there)."""
        return list(self.describe(uri).objects)

    def is_prefix(self, uri: str) -> bool:
        loc = parse_uri(uri)
        if loc.is_local:
            return os.path.isdir(loc.local_path or "")
        if not loc.key or loc.key.endswith("/"):
            return True
        remote = self._remote(loc)
        with self._errors("list", loc.uri, remote):
            response = remote.client.list_objects_v2(Bucket=loc.bucket, Prefix=loc.key + "/", MaxKeys=1)
            return bool(response.get("KeyCount") or response.get("Contents"))

    def exists(self, uri: str) -> bool:
        loc = parse_uri(uri)
        if loc.is_local:
            return os.path.exists(loc.local_path or "")
        remote = self._remote(loc)
        if loc.key and not loc.key.endswith("/"):
            with self._errors("check", loc.uri, remote):
                try:
                    remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
                    return True
                except Exception as err:  # noqa: BLE001
                    if not _is_not_found(err):
                        raise
        return self.is_prefix(uri) and bool(self._any_object(remote, loc))

    def _any_object(self, remote: _Remote, loc: StorageLocation) -> bool:
        prefix = loc.key if (not loc.key or loc.key.endswith("/")) else loc.key + "/"
        with self._errors("list", loc.uri, remote):
            response = remote.client.list_objects_v2(Bucket=loc.bucket, Prefix=prefix, MaxKeys=1)
            return bool(response.get("Contents"))

    # -- downloads ----------------------------------------------------------------------------------------------

    def download(self, uri: str, dest: str) -> TransferStats:
        """Download a prefix into directory `dest`, or a single object to file `dest`.

        If `dest` is an existing directory and `uri` names a single object, the file lands inside it under
        its base name. Raises StorageError when nothing exists at `uri`.
        """
        return self.download_listing(self.describe(uri), dest)

    def download_listing(self, listing: ObjectListing, dest: str) -> TransferStats:
        """Download exactly the objects of `listing` (as `download` would), e.g. the listing a cache key was
        computed from. Ranged GETs use If-Match with the listed ETag, so a concurrent change fails loudly
        instead of mixing versions."""
        loc = listing.location
        if not listing.objects:
            via = "" if loc.is_local else f" via connection '{self._connections[loc.scheme]}'"
            raise StorageError(
                f"nothing to download at {loc if loc.is_local else loc.uri}{via}: no such object, and no objects "
                "under that prefix; check the URI"
            )
        dest = os.path.abspath(dest)
        if listing.is_prefix:
            targets = [(o, os.path.join(dest, *o.relative_path.split("/"))) for o in listing.objects]
        else:
            final = os.path.join(dest, listing.objects[0].relative_path) if os.path.isdir(dest) else dest
            targets = [(listing.objects[0], final)]
        description = f"download {loc if loc.is_local else loc.uri} -> {dest}"
        progress = TransferProgress(
            description, listing.total_bytes, len(targets), interval=self.progress_interval, logger=log
        )
        progress.start()
        started = time.monotonic()
        if loc.is_local:
            self._copy_local_files(targets, progress, str(loc))
        else:
            self._download_remote(loc, targets, progress)
        progress.finish()
        return TransferStats(files=len(targets), bytes=listing.total_bytes, seconds=time.monotonic() - started)

    def _download_remote(self, loc: StorageLocation, targets: list[tuple[ObjectInfo, str]], progress) -> None:
        from s3transfer.manager import TransferManager

        remote = self._remote(loc)
        KnownObject, Progress, OnDone = _subscriber_classes()
        failed = threading.Event()
        temps: list[str] = []
        # Checking MD5s must not run on s3transfer's single IO thread: a small pool of its own.
        verify_pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="verify")
        checks: list[Future] = []
        checks_lock = threading.Lock()

        def finish_one(info: ObjectInfo, temp: str, final: str, future) -> None:
            uri = f"{loc.scheme}://{loc.bucket}/{info.key}"
            try:
                future.result()  # re-raises the transfer's error
                self._verify_download(temp, info, uri, remote)
                os.replace(temp, final)
            except Exception as err:  # noqa: BLE001
                log.debug("download %s failed", uri, exc_info=True)
                raise _translate_error(err, "download", uri, remote) from None
            progress.add_file()

        def on_done_for(info: ObjectInfo, temp: str, final: str):
            def on_done(future) -> None:
                try:
                    future.result()
                except BaseException:  # noqa: BLE001 - reported by finish_one
                    failed.set()
                with checks_lock:
                    checks.append(verify_pool.submit(finish_one, info, temp, final, future))

            return on_done

        try:
            with self._errors("download", loc.uri, remote):
                with TransferManager(remote.client, self._transfer_config()) as manager:
                    created_dirs: set[str] = set()
                    for info, final in targets:
                        if failed.is_set():
                            break  # stop submitting; the first error is raised below
                        directory = os.path.dirname(final)
                        if directory not in created_dirs:
                            os.makedirs(directory, exist_ok=True)
                            created_dirs.add(directory)
                        temp = _temp_name(final)
                        temps.append(temp)
                        manager.download(
                            loc.bucket,
                            info.key,
                            temp,
                            subscribers=[KnownObject(info.size, info.etag), Progress(progress), OnDone(on_done_for(info, temp, final))],
                        )
                # Leaving the manager's block waited for every transfer; now wait for the verifications.
                verify_pool.shutdown(wait=True)
                for check in checks:
                    check.result()
        finally:
            verify_pool.shutdown(wait=True, cancel_futures=True)
            for temp in temps:
                _remove_quietly(temp)

    def _verify_download(self, path: str, info: ObjectInfo, uri: str, remote: _Remote | None) -> None:
        size = os.path.getsize(path)
        if size != info.size:
            raise StorageError(
                f"downloaded {uri} has {size} bytes but the listing said {info.size}; the object changed or the "
                "transfer was cut short; retry the task"
            )
        if remote is not None and _is_md5_etag(info.etag):
            digest = _md5_file(path)
            if digest != info.etag and not self._etag_is_not_md5(remote, uri, info):
                raise StorageError(
                    f"downloaded {uri} has MD5 {digest} but its ETag is {info.etag}; the transfer was corrupted "
                    "or the object changed; retry the task"
                )

    def _etag_is_not_md5(self, remote: _Remote, uri: str, info: ObjectInfo) -> bool:
        """Objects encrypted with SSE-KMS / SSE-C have 32-hex ETags that are not the MD5 of the content."""
        loc = parse_uri(uri)
        try:
            head = remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
        except Exception:  # noqa: BLE001 - fall back to treating the ETag as an MD5
            return False
        return head.get("ServerSideEncryption") == "aws:kms" or bool(head.get("SSECustomerAlgorithm"))

    def _copy_local_files(self, targets: list[tuple[Any, str]], progress, label: str) -> None:
        """Copy (source ObjectInfo / path, final path) pairs in parallel, each via a temp name + rename."""

        def copy_one(source: str, final: str, expected_size: int | None) -> None:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            temp = _temp_name(final)
            try:
                shutil.copyfile(source, temp)
                shutil.copymode(source, temp)
                size = os.path.getsize(temp)
                if expected_size is not None and size != expected_size:
                    raise StorageError(
                        f"copied {source} has {size} bytes but had {expected_size} when listed; it changed during "
                        "the copy; retry"
                    )
                os.replace(temp, final)
            except BaseException:
                _remove_quietly(temp)
                raise
            progress.add_bytes(size)
            progress.add_file()

        with self._errors("copy", label, None):
            with ThreadPoolExecutor(max_workers=min(self.concurrency, 8), thread_name_prefix="copy") as pool:
                futures = []
                for info, final in targets:
                    source = info.key if isinstance(info, ObjectInfo) else info
                    size = info.size if isinstance(info, ObjectInfo) else None
                    futures.append(pool.submit(copy_one, source, final, size))
                try:
                    for fut in futures:
                        fut.result()
                except BaseException:
                    for fut in futures:
                        fut.cancel()
                    raise

    # -- uploads ------------------------------------------------------------------------------------------------

    def upload_file(self, path: str, uri: str) -> TransferStats:
        """Upload one local file to `uri` (if `uri` ends with '/', under the file's base name)."""
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise StorageError(f"cannot upload {path}: no such file; check the path")
        loc = parse_uri(uri)
        if loc.is_local:
            dest = loc.local_path or ""
            if uri.endswith("/") or os.path.isdir(dest):
                dest = os.path.join(dest, os.path.basename(path))
            loc = StorageLocation(LOCAL_SCHEME, "", "", dest)
        elif not loc.key or loc.key.endswith("/"):
            loc = loc.child(os.path.basename(path))
        size = os.path.getsize(path)
        return self._upload([(path, loc, size)], loc, verify_listing=False)

    def upload_dir(self, directory: str, uri_prefix: str) -> TransferStats:
        """Upload every regular file below `directory` to `uri_prefix`/<relative path>."""
        directory = os.path.abspath(directory)
        if not os.path.isdir(directory):
            raise StorageError(f"cannot upload {directory}: not a directory; check the path")
        base = parse_uri(uri_prefix)
        listing = self._describe_local(StorageLocation(LOCAL_SCHEME, "", "", directory))
        if not base.is_local and base.key and not base.key.endswith("/"):
            base = StorageLocation(base.scheme, base.bucket, base.key + "/")
        items = [(o.key, base.child(o.relative_path), o.size) for o in listing.objects]
        return self._upload(items, base, verify_listing=True)

    def _upload(self, items: list[tuple[str, StorageLocation, int]], base: StorageLocation, *, verify_listing: bool):
        total = sum(size for _, _, size in items)
        description = f"upload -> {base if base.is_local else base.uri}"
        progress = TransferProgress(description, total, len(items), interval=self.progress_interval, logger=log)
        progress.start()
        started = time.monotonic()
        if base.is_local:
            self._copy_local_files([(src, loc.local_path) for src, loc, _ in items], progress, str(base))
        else:
            self._upload_remote(items, base, progress, verify_listing=verify_listing)
        progress.finish()
        return TransferStats(files=len(items), bytes=total, seconds=time.monotonic() - started)

    def _upload_remote(self, items, base: StorageLocation, progress, *, verify_listing: bool) -> None:
        from s3transfer.manager import TransferManager

        remote = self._remote(base)
        _, Progress, OnDone = _subscriber_classes()
        transfer_config = self._transfer_config()

        def on_done(future) -> None:
            try:
                future.result()
            except BaseException:  # noqa: BLE001 - the error is raised from result() below
                return
            progress.add_file()

        futures = []
        with self._errors("upload", base.uri, remote):
            with TransferManager(remote.client, transfer_config) as manager:
                for path, loc, _size in items:
                    futures.append(
                        (path, loc, manager.upload(path, loc.bucket, loc.key, subscribers=[Progress(progress), OnDone(on_done)]))
                    )
                for path, loc, fut in futures:
                    try:
                        fut.result()
                    except Exception as err:  # noqa: BLE001 - raising here cancels (and aborts) the rest
                        log.debug("upload %s failed", loc.uri, exc_info=True)
                        raise _translate_error(err, "upload", loc.uri, remote) from None
        # Verify what landed: sizes always, MD5 for single-part uploads (their ETag is the MD5).
        with self._errors("verify upload to", base.uri, remote):
            if verify_listing and len(items) > 1:
                landed = {o.key: o for o in self._list_prefix(remote, base, base.key)}
            else:
                landed = {}
                for _path, loc, _size in items:
                    head = remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
                    landed[loc.key] = ObjectInfo(loc.key, "", int(head["ContentLength"]), _normalize_etag(head.get("ETag")))
        for path, loc, size in items:
            info = landed.get(loc.key)
            if info is None or info.size != size:
                raise StorageError(
                    f"uploaded {loc.uri} but it has {'no object' if info is None else f'{info.size} bytes'} "
                    f"instead of {size}; retry the task"
                )
            if size < transfer_config.multipart_threshold and _is_md5_etag(info.etag):
                digest = _md5_file(path)
                if digest != info.etag and not self._etag_is_not_md5(remote, loc.uri, info):
                    raise StorageError(
                        f"uploaded {loc.uri} has ETag {info.etag} but the local file's MD5 is {digest}; retry the task"
                    )

    # -- small objects ------------------------------------------------------------------------------------------

    def read_bytes(self, uri: str) -> bytes:
        loc = parse_uri(uri)
        if loc.is_local:
            with self._errors("read", loc.local_path or "", None):
                with open(loc.local_path or "", "rb") as fh:
                    return fh.read()
        remote = self._remote(loc)
        with self._errors("read", loc.uri, remote):
            response = remote.client.get_object(Bucket=loc.bucket, Key=loc.key)
            data = response["Body"].read()
            etag = _normalize_etag(response.get("ETag"))
        if len(data) != int(response.get("ContentLength", len(data))):
            raise StorageError(f"read {loc.uri}: got {len(data)} bytes, expected {response['ContentLength']}; retry")
        if _is_md5_etag(etag) and hashlib.md5(data, usedforsecurity=False).hexdigest() != etag:
            info = ObjectInfo(loc.key, "", len(data), etag)
            if not self._etag_is_not_md5(remote, loc.uri, info):
                raise StorageError(f"read {loc.uri}: content does not match its ETag; retry")
        return data

    def write_bytes(self, uri: str, data: bytes) -> None:
        loc = parse_uri(uri)
        if isinstance(data, str):
            data = data.encode()
        if loc.is_local:
            path = loc.local_path or ""
            with self._errors("write", path, None):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                temp = _temp_name(path)
                try:
                    with open(temp, "wb") as fh:
                        fh.write(data)
                        fh.flush()
                        os.fsync(fh.fileno())
                    os.replace(temp, path)
                except BaseException:
                    _remove_quietly(temp)
                    raise
            return
        if not loc.key or loc.key.endswith("/"):
            raise StorageError(f"cannot write to {loc.uri}: it names a prefix; give an object key")
        remote = self._remote(loc)
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        with self._errors("write", loc.uri, remote):
            # Content-MD5 makes the server reject a body corrupted on the way.
            remote.client.put_object(Bucket=loc.bucket, Key=loc.key, Body=data, ContentMD5=md5)

    def delete(self, uri: str) -> int:
        """Delete an object, or every object under a prefix; returns how many were deleted (missing => 0)."""
        loc = parse_uri(uri)
        if loc.is_local:
            path = loc.local_path or ""
            with self._errors("delete", path, None):
                if os.path.isdir(path) and not os.path.islink(path):
                    count = sum(len(files) for _, _, files in os.walk(path))
                    shutil.rmtree(path)
                    return count
                if os.path.lexists(path):
                    os.unlink(path)
                    return 1
                return 0
        if not loc.key:
            raise StorageError(f"refusing to delete the whole bucket {loc.uri}; give a prefix")
        listing = self.describe(uri)
        remote = self._remote(loc)
        keys = [o.key for o in listing.objects]
        with self._errors("delete", loc.uri, remote):
            for start in range(0, len(keys), 1000):
                batch = keys[start : start + 1000]
                response = remote.client.delete_objects(
                    Bucket=loc.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
                errors = response.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise StorageError(
                        f"cannot delete {loc.scheme}://{loc.bucket}/{first.get('Key')} via connection "
                        f"'{remote.conn_id}': {first.get('Code')}; check the permissions of the connection's credentials"
                    )
        return len(keys)


def _check_no_file_dir_clash(objects: list[ObjectInfo], uri: str) -> None:
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


def _is_not_found(err: BaseException) -> bool:
    import botocore.exceptions as bx

    if isinstance(err, bx.ClientError):
        code = str((err.response.get("Error") or {}).get("Code") or "")
        status = (err.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return code in _NO_OBJECT_CODES or status == 404
    return False


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        log.debug("could not remove temporary file %s", path, exc_info=True)


__all__ = [
    "DEFAULT_CONNECTIONS",
    "ObjectInfo",
    "ObjectListing",
    "ObjectStorageHook",
    "StorageError",
    "StorageLocation",
    "TransferStats",
    "parse_uri",
]

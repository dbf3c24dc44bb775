"""Object storage for training jobs: s3://, cos://, oss://, obs:// URIs and local paths behind one hook.

Every scheme is S3-compatible and resolves to an Airflow connection of type aws (defaults below; a job
may name another with `connections={"cos": "my_cos"}`). Credentials and the boto3 session come from the
amazon provider's AwsBaseHook, so everything Airflow supports for AWS connections works (login/password,
profiles, assume-role, AIRFLOW_CONN_<ID> environment variables, secrets backends). The connection extra
carries `endpoint_url`, `region_name` (or `region`) and `addressing_style` ("path" / "virtual"); a
`config_kwargs` dict in the extra is merged over our botocore defaults.

Transfers are parallel across objects and ranged/multipart within large ones (s3transfer's TransferManager;
objects below the multipart threshold are single GetObject calls on a worker pool), with botocore's
"standard" retry mode: no hand-written signing, retries or multipart. What lands is
verified: size always, and MD5 where the ETag is a plain MD5 (single-part uploads). Files are written
under a temporary name and renamed, uploads become visible only when complete (S3 PutObject and
CompleteMultipartUpload are atomic; local copies use temp + rename).

Local paths (plain or file://) work with every method, so a job can read from and write to a shared
file system exactly as it does with a bucket.

Errors are `StorageError`: one line naming the action, the URI, the connection id and what to do; never
a secret and never a stack of botocore internals (the original exception is logged at DEBUG).

The hook is the public face; the parts live next to it: storage_location (URIs, listings), storage_errors
(the one-line errors), storage_client (clients from Airflow connections), storage_listing (listing prefixes),
storage_downloads, storage_uploads and storage_stream (the transfer engines; why small objects bypass s3transfer),
storage_small (whole small objects, deletes), storage_transfers (what the engines share, local copies),
storage_retries (what is retried, how often).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from operators.storage.client import Remote, make_remote
from operators.storage.downloads import download_objects
from operators.storage.errors import StorageError, is_not_found, translate_error
from operators.storage.listing import describe_local, describe_remote, list_prefix
from operators.storage.location import (
    DEFAULT_CONNECTIONS,
    LOCAL_SCHEME,
    ObjectInfo,
    ObjectListing,
    StorageLocation,
    TransferStats,
    parse_uri,
)
from operators.storage.small_objects import (
    delete_keys,
    delete_local,
    put_object,
    read_object,
    write_local,
)
from operators.storage.transfers import (
    TransferTuning,
    copy_local_files,
)
from operators.storage.uploads import upload_files
from operators.storage.progress import DEFAULT_INTERVAL_SECONDS, TransferProgress

if TYPE_CHECKING:
    from operators.settings import TrainingSettings

log = logging.getLogger(__name__)


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
                    f"connections: unknown scheme {scheme!r}; use one of {', '.join(sorted(DEFAULT_CONNECTIONS))}",
                    permanent=True,
                )
            if not isinstance(conn_id, str) or not conn_id.strip():
                raise StorageError(f"connections: the connection id for {scheme!r} must be a non-empty string", permanent=True)
        self._connections = {**DEFAULT_CONNECTIONS, **{k: v.strip() for k, v in overrides.items()}}
        self._settings = settings
        self.progress_interval = progress_interval
        self._remotes: dict[str, Remote] = {}
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

    @property
    def tuning(self) -> TransferTuning:
        return TransferTuning(
            concurrency=self.concurrency,
            multipart_threshold=max(1, int(self.settings.multipart_threshold)),
            multipart_chunksize=max(1, int(self.settings.multipart_chunksize)),
        )

    def _remote(self, loc: StorageLocation) -> Remote:
        conn_id = self._connections[loc.scheme]
        with self._remotes_lock:
            remote = self._remotes.get(conn_id)
            if remote is None:
                remote = make_remote(loc, conn_id, self.concurrency)
                self._remotes[conn_id] = remote
            return remote

    @contextmanager
    def _errors(self, action: str, uri: str, remote: Remote | None) -> Iterator[None]:
        try:
            yield
        except StorageError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure becomes one actionable line
            log.debug("%s %s failed", action, uri, exc_info=True)
            raise translate_error(err, action, uri, remote) from None

    # -- listing ------------------------------------------------------------------------------------------------

    def describe(self, uri: str, *, split_after: Sequence[str] = ()) -> ObjectListing:
        """List what `uri` names: the objects under a prefix (recursively), or one object.

        A URI ending in '/' (or naming a bucket root / local directory) is a prefix. Otherwise it is a
        prefix if objects exist under `key/`, else the single object `key` if it exists, else an empty
        prefix. A warm cache check costs exactly these LIST requests and no object bytes.

        `split_after`: object keys that cut the listing into key ranges listed in parallel (e.g. every
        1000th key of the previous listing of this prefix). Only a hint: the result is the same whatever the
        keys are now, a range that grew just takes more pages.
        """
        loc = parse_uri(uri)
        if loc.is_local:
            return describe_local(loc)
        remote = self._remote(loc)
        with self._errors("list", loc.uri, remote):
            return describe_remote(remote, self.concurrency, loc, split_after)

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
                    if not is_not_found(err):
                        raise
        return self.is_prefix(uri) and bool(self._any_object(remote, loc))

    def presigned_url(self, uri: str, expires_seconds: int = 900) -> str:
        """A short-lived https GET URL of one object (the signature, never the secret key, is in the URL)."""
        loc = parse_uri(uri)
        if loc.is_local:
            raise StorageError(f"presign {uri}: a local path has no URL; read it with read_bytes", permanent=True)
        remote = self._remote(loc)
        with self._errors("presign", loc.uri, remote):
            return remote.client.generate_presigned_url(
                "get_object", Params={"Bucket": loc.bucket, "Key": loc.key}, ExpiresIn=int(expires_seconds))

    def _any_object(self, remote: Remote, loc: StorageLocation) -> bool:
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
                "under that prefix; check the URI",
                permanent=True,
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
        remote = self._remote(loc)
        with self._errors("download", loc.uri, remote):
            download_objects(remote, loc, targets, progress, self.tuning)

    def _copy_local_files(self, targets, progress, label: str) -> None:
        with self._errors("copy", label, None):
            copy_local_files(targets, progress, self.concurrency)

    # -- uploads ------------------------------------------------------------------------------------------------

    def upload_file(self, path: str, uri: str) -> TransferStats:
        """Upload one local file to `uri` (if `uri` ends with '/', under the file's base name)."""
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise StorageError(f"cannot upload {path}: no such file; check the path", permanent=True)
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
            raise StorageError(f"cannot upload {directory}: not a directory; check the path", permanent=True)
        base = parse_uri(uri_prefix)
        listing = describe_local(StorageLocation(LOCAL_SCHEME, "", "", directory))
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
        remote = self._remote(base)
        list_landed = (lambda: list_prefix(remote, self.concurrency, base, base.key)) if verify_listing else None
        with self._errors("upload", base.uri, remote):
            upload_files(remote, base, items, progress, self.tuning, list_landed)


    def upload_packed_directory(self, src_dir: str, uri: str, archive_path: str, *,
                                within: str | None = None) -> TransferStats:
        """Pack `src_dir` into a .tar.gz at `archive_path` and upload it to `uri`, the two overlapped: each
        multipart part goes up as soon as the packer has written it (storage_stream), so the whole takes about as
        long as the slower of the two, and memory stays bounded by the parts in flight whatever the size.
        `within`: the job root `src_dir` lies in (safe_tar.pack_directory follows no link below it)."""
        from operators.storage.disk_space import check_pack_space, is_disk_full, pack_full
        from operators.safe_tar import pack_directory

        loc = parse_uri(uri)
        check_pack_space(src_dir, archive_path)  # before packing a byte: the archive is about the model's size
        if loc.is_local or not loc.key or loc.key.endswith("/"):
            try:
                pack_directory(src_dir, archive_path, within=within)  # a copy is no slower: nothing to overlap
            except OSError as err:
                if is_disk_full(err):
                    raise pack_full(src_dir, archive_path) from None
                raise
            return self.upload_file(archive_path, uri)
        from operators.storage.stream import upload_stream

        remote = self._remote(loc)
        progress = TransferProgress(f"pack {src_dir} + upload -> {loc.uri}", None, 1, interval=self.progress_interval,
                                    logger=log)
        progress.start()
        started = time.monotonic()
        try:
            with self._errors("upload", loc.uri, remote):
                size = upload_stream(remote, loc, lambda write: pack_directory(src_dir, archive_path, sink=write, within=within),
                                     progress, self.tuning.transfer_config())
        except StorageError as err:
            if is_disk_full(err):  # packing filled the job root's disk: the upload was aborted, nothing landed
                raise pack_full(src_dir, archive_path) from None
            raise
        progress.finish()
        return TransferStats(files=1, bytes=size, seconds=time.monotonic() - started)

    # -- small objects (storage_small) ---------------------------------------------------------------------------

    def read_bytes(self, uri: str) -> bytes:
        loc = parse_uri(uri)
        if loc.is_local:
            with self._errors("read", loc.local_path or "", None):
                with open(loc.local_path or "", "rb") as fh:
                    return fh.read()
        remote = self._remote(loc)
        with self._errors("read", loc.uri, remote):
            return read_object(remote, loc)

    def write_bytes(self, uri: str, data: bytes) -> None:
        loc = parse_uri(uri)
        if isinstance(data, str):
            data = data.encode()
        if loc.is_local:
            with self._errors("write", loc.local_path or "", None):
                write_local(loc.local_path or "", data)
            return
        if not loc.key or loc.key.endswith("/"):
            raise StorageError(f"cannot write to {loc.uri}: it names a prefix; give an object key", permanent=True)
        remote = self._remote(loc)
        with self._errors("write", loc.uri, remote):
            put_object(remote, loc, data)

    def delete(self, uri: str) -> int:
        """Delete an object, or every object under a prefix; returns how many were deleted (missing => 0)."""
        loc = parse_uri(uri)
        if loc.is_local:
            with self._errors("delete", loc.local_path or "", None):
                return delete_local(loc.local_path or "")
        if not loc.key:
            raise StorageError(f"refusing to delete the whole bucket {loc.uri}; give a prefix", permanent=True)
        listing = self.describe(uri)
        remote = self._remote(loc)
        with self._errors("delete", loc.uri, remote):
            return delete_keys(remote, loc, [o.key for o in listing.objects])


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

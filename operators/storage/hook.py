"""Object storage for training jobs: s3://, cos://, oss://, obs:// URIs and local paths behind one hook.

Every remote scheme is S3-compatible and resolves to an Airflow connection of type aws (defaults in
location.DEFAULT_CONNECTIONS; a job may name another with `connections={"cos": "my_cos"}`). Credentials and the
boto3 session come from the amazon provider's AwsBaseHook, so everything Airflow supports for AWS connections works
(login/password, profiles, assume-role, AIRFLOW_CONN_<ID> environment variables, secrets backends). The connection
extra carries `endpoint_url`, `region_name` (or `region`) and `addressing_style` ("path" / "virtual"); a
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

The hook is the public face: it picks the store of a location (stores.LocalStore, or the stores.RemoteStore of
the scheme's connection) and adds what every store shares (progress lines, the "nothing there" error, stats).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Mapping, Sequence

from operators.settings import training_settings
from operators.storage.disk_space import check_pack_space, is_disk_full, pack_full
from operators.storage.errors import StorageError
from operators.storage.location import (
    DEFAULT_CONNECTIONS,
    LOCAL_SCHEME,
    ObjectInfo,
    ObjectListing,
    StorageLocation,
    TransferStats,
    parse_uri,
)
from operators.storage.progress import DEFAULT_INTERVAL_SECONDS, TransferProgress
from operators.storage.remote import make_remote
from operators.storage.stores import LocalStore, RemoteStore, Store
from operators.storage.transfers import TransferTuning

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
        self._stores: dict[str, Store] = {}  # by connection id (LOCAL_SCHEME for the local store)
        self._stores_lock = threading.Lock()

    # -- configuration ------------------------------------------------------------------------------------------

    @property
    def settings(self) -> TrainingSettings:
        if self._settings is None:
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

    def store(self, uri_or_loc: str | StorageLocation) -> Store:
        """The store that holds `uri_or_loc`: the local store, or the remote store of its scheme's connection."""
        loc = parse_uri(uri_or_loc) if isinstance(uri_or_loc, str) else uri_or_loc
        key = LOCAL_SCHEME if loc.scheme == LOCAL_SCHEME else self._connections[loc.scheme]
        with self._stores_lock:
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = self._new_store(loc, key)
            return store

    def _new_store(self, loc: StorageLocation, key: str) -> Store:
        if loc.scheme == LOCAL_SCHEME:
            return LocalStore(lambda: self.tuning)
        return RemoteStore(key, lambda: make_remote(loc, key, self.concurrency), lambda: self.tuning)

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
        return self.store(loc).describe(loc, split_after)

    def list_objects(self, uri: str) -> list[ObjectInfo]:
        """The objects under a prefix, or the single object `uri` names ([] when nothing is there)."""
        return list(self.describe(uri).objects)

    def is_prefix(self, uri: str) -> bool:
        loc = parse_uri(uri)
        return self.store(loc).is_prefix(loc)

    def exists(self, uri: str) -> bool:
        loc = parse_uri(uri)
        return self.store(loc).exists(loc)

    def local_path(self, uri: str) -> str | None:
        """The file `uri` can be read from in place (a local path), or None when its bytes must be fetched."""
        loc = parse_uri(uri)
        return self.store(loc).local_path(loc)

    def presigned_url(self, uri: str, expires_seconds: int = 900) -> str:
        """A short-lived https GET URL of one object (the signature, never the secret key, is in the URL)."""
        loc = parse_uri(uri)
        return self.store(loc).presigned_url(loc, expires_seconds)

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
        store = self.store(loc)
        if not listing.objects:
            raise StorageError(
                f"nothing to download at {store.name(loc)}{store.via}: no such object, and no objects "
                "under that prefix; check the URI",
                permanent=True,
            )
        dest = os.path.abspath(dest)
        if listing.is_prefix:
            targets = [(o, os.path.join(dest, *o.relative_path.split("/"))) for o in listing.objects]
        else:
            final = os.path.join(dest, listing.objects[0].relative_path) if os.path.isdir(dest) else dest
            targets = [(listing.objects[0], final)]
        progress = TransferProgress(f"download {store.name(loc)} -> {dest}", listing.total_bytes, len(targets),
                                    interval=self.progress_interval, logger=log)
        progress.start()
        started = time.monotonic()
        store.download(loc, targets, progress)
        progress.finish()
        return TransferStats(files=len(targets), bytes=listing.total_bytes, seconds=time.monotonic() - started)

    # -- uploads ------------------------------------------------------------------------------------------------

    def upload_file(self, path: str, uri: str) -> TransferStats:
        """Upload one local file to `uri` (if `uri` ends with '/', under the file's base name)."""
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise StorageError(f"cannot upload {path}: no such file; check the path", permanent=True)
        loc = parse_uri(uri)
        store = self.store(loc)
        loc = store.upload_location(loc, path, uri.endswith("/"))
        return self._upload(store, [(path, loc, os.path.getsize(path))], loc, verify_listing=False)

    def upload_dir(self, directory: str, uri_prefix: str) -> TransferStats:
        """Upload every regular file below `directory` to `uri_prefix`/<relative path>."""
        directory = os.path.abspath(directory)
        if not os.path.isdir(directory):
            raise StorageError(f"cannot upload {directory}: not a directory; check the path", permanent=True)
        store = self.store(parse_uri(uri_prefix))
        base = store.folder(parse_uri(uri_prefix))
        listing = self.describe(directory)
        items = [(o.key, base.child(o.relative_path), o.size) for o in listing.objects]
        return self._upload(store, items, base, verify_listing=True)

    def _upload(self, store: Store, items, base: StorageLocation, *, verify_listing: bool) -> TransferStats:
        total = sum(size for _, _, size in items)
        progress = TransferProgress(f"upload -> {store.name(base)}", total, len(items),
                                    interval=self.progress_interval, logger=log)
        progress.start()
        started = time.monotonic()
        store.upload(items, base, progress, verify_listing=verify_listing)
        progress.finish()
        return TransferStats(files=len(items), bytes=total, seconds=time.monotonic() - started)

    def upload_packed_directory(self, src_dir: str, uri: str, archive_path: str, *,
                                within: str | None = None, max_content: int | None = None) -> TransferStats:
        """Pack `src_dir` into a .tar.gz at `archive_path` and upload it to `uri`, the two overlapped where the store
        can (each multipart part goes up as soon as the packer has written it: storage.obstore.uploads, or
        storage.botocore.stream), so the whole takes about as long as the slower of the two, and memory stays
        bounded by the parts in flight whatever the size.
        `within`: the job root `src_dir` lies in (safe_tar.pack_directory follows no link below it); `max_content`:
        the most content the archive may hold (safe_tar.PackTooLargeError past it, nothing uploaded)."""
        from operators.fs.safe_tar import pack_directory  # lazy: isal and tarfile, for the uploads that pack only

        loc = parse_uri(uri)
        store = self.store(loc)
        check_pack_space(src_dir, archive_path, within=within)  # before packing a byte: about the model's size
        if not store.can_stream_upload(loc):
            try:
                # a copy is no slower: nothing to overlap
                pack_directory(src_dir, archive_path, within=within, max_content=max_content)
            except OSError as err:
                if is_disk_full(err):
                    raise pack_full(src_dir, archive_path) from None
                raise
            return self.upload_file(archive_path, uri)
        progress = TransferProgress(f"pack {src_dir} + upload -> {store.name(loc)}", None, 1,
                                    interval=self.progress_interval, logger=log)
        progress.start()
        started = time.monotonic()
        try:
            size = store.upload_stream(
                loc, lambda write: pack_directory(src_dir, archive_path, sink=write, within=within,
                                                  max_content=max_content), progress)
        except StorageError as err:
            if is_disk_full(err):  # packing filled the job root's disk: the upload was aborted, nothing landed
                raise pack_full(src_dir, archive_path) from None
            raise
        progress.finish()
        return TransferStats(files=1, bytes=size, seconds=time.monotonic() - started)

    # -- small objects ------------------------------------------------------------------------------------------

    def read_bytes(self, uri: str) -> bytes:
        loc = parse_uri(uri)
        return self.store(loc).read_bytes(loc)

    def write_bytes(self, uri: str, data: bytes) -> None:
        loc = parse_uri(uri)
        self.store(loc).write_bytes(loc, data.encode() if isinstance(data, str) else data)

    def delete(self, uri: str) -> int:
        """Delete an object, or every object under a prefix; returns how many were deleted (missing => 0)."""
        loc = parse_uri(uri)
        return self.store(loc).delete(loc, lambda: self.describe(uri))


__all__ = [
    "DEFAULT_CONNECTIONS",
    "ObjectInfo",
    "ObjectListing",
    "ObjectStorageHook",
    "Store",
    "StorageError",
    "StorageLocation",
    "TransferStats",
    "parse_uri",
]

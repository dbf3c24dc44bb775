"""The one storage interface and its two implementations: `LocalStore` (paths, file://) and `RemoteStore` (s3://,
cos://, oss://, obs://: an S3-compatible endpoint of one Airflow connection).

Callers (ObjectStorageHook, code staging, the data cache, the view's artifact links) ask the store of a location
what they need, instead of branching on local vs remote: how to name it in a message, whether its bytes can be read
in place (`local_path`), how to list, transfer, read, write, delete and link it.

RemoteStore moves a bucket's bytes through one of two engines, chosen per bucket of a connection by
storage.obstore.store.obstore_settings: storage.obstore (object_store, in Rust) wherever it reaches the bucket as
botocore does, storage.botocore (boto3, s3transfer) for the rest; small objects, deletes and links are botocore's.
"""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from operators.storage.errors import StorageError, is_not_found, translate_error
from operators.storage.listing import (
    any_key_under,
    describe_local,
    describe_remote,
    exact_object,
    list_prefix,
    remote_lists_through_obstore,
)
from operators.storage.location import (
    LOCAL_SCHEME,
    ObjectInfo,
    ObjectListing,
    StorageLocation,
)
from operators.storage.obstore import store as obstore_store
from operators.storage.progress import TransferProgress
from operators.storage.small_objects import delete_local, write_local
from operators.storage.transfers import TransferTuning, UploadItem, copy_local_files

log = logging.getLogger("operators.storage.hook")


@contextmanager
def storage_errors(action: str, uri: str, remote=None) -> Iterator[None]:
    """Every failure inside becomes one actionable StorageError line (the original is logged at DEBUG)."""
    try:
        yield
    except StorageError:
        raise
    except Exception as err:  # noqa: BLE001 - every failure becomes one actionable line
        log.debug("%s %s failed", action, uri, exc_info=True)
        raise translate_error(err, action, uri, remote) from None


class Store(ABC):
    """What the pipeline does with one kind of storage. Locations come from `location.parse_uri`."""

    connection_id: str | None = None  # the Airflow connection the bytes go through (None: this machine's files)

    def __init__(self, tuning: Callable[[], TransferTuning]) -> None:
        self._tuning = tuning

    @property
    def tuning(self) -> TransferTuning:
        return self._tuning()

    # -- naming -------------------------------------------------------------------------------------------------

    @abstractmethod
    def name(self, loc: StorageLocation) -> str:
        """How messages and progress lines name `loc` (a path, or a URI)."""

    @property
    def via(self) -> str:
        """What an error adds after the location so that the user knows which connection to check."""
        return f" via connection '{self.connection_id}'" if self.connection_id else ""

    def local_path(self, loc: StorageLocation) -> str | None:
        """The file `loc` can be read in place from (no copy needed), or None when its bytes must be fetched."""
        return None

    @property
    def lists_in_pages(self) -> bool:
        """Whether a listing is paged (so the split keys of the last listing speed up the next one)."""
        return False

    # -- listing ------------------------------------------------------------------------------------------------

    @abstractmethod
    def describe(self, loc: StorageLocation, split_after: Sequence[str] = ()) -> ObjectListing: ...

    @abstractmethod
    def is_prefix(self, loc: StorageLocation) -> bool: ...

    @abstractmethod
    def exists(self, loc: StorageLocation) -> bool: ...

    # -- transfers ----------------------------------------------------------------------------------------------

    @abstractmethod
    def download(self, loc: StorageLocation, targets: list[tuple[ObjectInfo, str]], progress: TransferProgress) -> None:
        """Fetch each listed object to its target path (complete files only: temp + rename, verified)."""

    @abstractmethod
    def upload_location(self, loc: StorageLocation, path: str, names_a_folder: bool) -> StorageLocation:
        """Where `upload_file(path, loc)` puts the file (under its base name when `loc` names a folder)."""

    @abstractmethod
    def folder(self, loc: StorageLocation) -> StorageLocation:
        """`loc` as a prefix / directory that children are placed under."""

    @abstractmethod
    def upload(self, items: list[UploadItem], base: StorageLocation, progress: TransferProgress, *,
               verify_listing: bool) -> None:
        """Put each file at its destination; each becomes visible only when complete."""

    def can_stream_upload(self, loc: StorageLocation) -> bool:
        """Whether an archive can go up while it is being written (multipart parts as the packer writes them)."""
        return False

    def upload_stream(self, loc: StorageLocation, produce, progress: TransferProgress) -> int:
        raise NotImplementedError

    # -- small objects ------------------------------------------------------------------------------------------

    @abstractmethod
    def read_bytes(self, loc: StorageLocation) -> bytes: ...

    @abstractmethod
    def write_bytes(self, loc: StorageLocation, data: bytes) -> None: ...

    @abstractmethod
    def delete(self, loc: StorageLocation, listing: Callable[[], ObjectListing]) -> int: ...

    @abstractmethod
    def presigned_url(self, loc: StorageLocation, expires_seconds: int) -> str: ...


class LocalStore(Store):
    """Files on this machine (a shared file system a job reads from and writes to as it would a bucket)."""

    def name(self, loc: StorageLocation) -> str:
        return loc.local_path or ""

    def local_path(self, loc: StorageLocation) -> str | None:
        return loc.local_path

    def describe(self, loc: StorageLocation, split_after: Sequence[str] = ()) -> ObjectListing:
        return describe_local(loc)

    def is_prefix(self, loc: StorageLocation) -> bool:
        return os.path.isdir(loc.local_path or "")

    def exists(self, loc: StorageLocation) -> bool:
        return os.path.exists(loc.local_path or "")

    def download(self, loc: StorageLocation, targets: list[tuple[ObjectInfo, str]], progress: TransferProgress) -> None:
        with storage_errors("copy", self.name(loc)):
            copy_local_files(targets, progress, self.tuning.concurrency)

    def upload_location(self, loc: StorageLocation, path: str, names_a_folder: bool) -> StorageLocation:
        dest = loc.local_path or ""
        if names_a_folder or os.path.isdir(dest):
            dest = os.path.join(dest, os.path.basename(path))
        return StorageLocation(LOCAL_SCHEME, "", "", dest)

    def folder(self, loc: StorageLocation) -> StorageLocation:
        return loc

    def upload(self, items: list[UploadItem], base: StorageLocation, progress: TransferProgress, *,
               verify_listing: bool) -> None:
        with storage_errors("copy", self.name(base)):
            copy_local_files([(src, dest.local_path) for src, dest, _ in items], progress, self.tuning.concurrency)

    def read_bytes(self, loc: StorageLocation) -> bytes:
        with storage_errors("read", self.name(loc)):
            with open(loc.local_path or "", "rb") as fh:
                return fh.read()

    def write_bytes(self, loc: StorageLocation, data: bytes) -> None:
        with storage_errors("write", self.name(loc)):
            write_local(loc.local_path or "", data)

    def delete(self, loc: StorageLocation, listing: Callable[[], ObjectListing]) -> int:
        with storage_errors("delete", self.name(loc)):
            return delete_local(loc.local_path or "")

    def presigned_url(self, loc: StorageLocation, expires_seconds: int) -> str:
        raise StorageError(f"presign {self.name(loc)}: a local path has no URL; read it with read_bytes", permanent=True)


class RemoteStore(Store):
    """One S3-compatible endpoint, reached through one Airflow connection (its boto3 client built on first use)."""

    def __init__(self, connection_id: str, make_remote: Callable[[], object], tuning: Callable[[], TransferTuning]):
        super().__init__(tuning)
        self.connection_id = connection_id
        self._make_remote = make_remote
        self._remote = None
        self._lock = threading.Lock()

    @property
    def remote(self):
        """The connection's client (storage.remote.Remote); built once, on first use (by one thread)."""
        with self._lock:
            if self._remote is None:
                self._remote = self._make_remote()
            return self._remote

    def name(self, loc: StorageLocation) -> str:
        return loc.uri

    @property
    def lists_in_pages(self) -> bool:
        return True

    def describe(self, loc: StorageLocation, split_after: Sequence[str] = ()) -> ObjectListing:
        remote = self.remote
        with storage_errors("list", loc.uri, remote):
            return describe_remote(remote, self.tuning.concurrency, loc, split_after)

    def is_prefix(self, loc: StorageLocation) -> bool:
        if not loc.key or loc.key.endswith("/"):
            return True
        remote = self.remote
        with storage_errors("list", loc.uri, remote):
            return any_key_under(remote, loc, loc.key + "/")

    def exists(self, loc: StorageLocation) -> bool:
        remote = self.remote
        if loc.key and not loc.key.endswith("/"):
            with storage_errors("check", loc.uri, remote):
                if remote_lists_through_obstore(remote, loc):
                    if exact_object(remote, loc) is not None:
                        return True
                else:
                    try:
                        remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
                        return True
                    except Exception as err:  # noqa: BLE001
                        if not is_not_found(err):
                            raise
        if not self.is_prefix(loc):
            return False
        prefix = loc.key if (not loc.key or loc.key.endswith("/")) else loc.key + "/"
        with storage_errors("list", loc.uri, remote):
            return any_key_under(remote, loc, prefix)

    def download(self, loc: StorageLocation, targets: list[tuple[ObjectInfo, str]], progress: TransferProgress) -> None:
        """obstore moves the bytes wherever it can reach the bucket as botocore does (storage.obstore.downloads); the
        botocore path (storage.botocore.downloads) is kept for the connections it cannot serve."""
        remote = self.remote
        with storage_errors("download", loc.uri, remote):
            settings = obstore_store.obstore_settings(remote, loc.bucket) if targets else None
            if settings is not None:
                # lazy: obstore is optional (botocore moves the bytes without it)
                from operators.storage.obstore.downloads import download_objects_obstore

                download_objects_obstore(settings, remote, loc, targets, progress, self.tuning)
                return
            from operators.storage.botocore.downloads import download_objects  # lazy: the botocore engine (s3transfer, botocore's retries), for the connections obstore does not serve

            download_objects(remote, loc, targets, progress, self.tuning)

    def upload_location(self, loc: StorageLocation, path: str, names_a_folder: bool) -> StorageLocation:
        if not loc.key or loc.key.endswith("/"):
            return loc.child(os.path.basename(path))
        return loc

    def folder(self, loc: StorageLocation) -> StorageLocation:
        if loc.key and not loc.key.endswith("/"):
            return StorageLocation(loc.scheme, loc.bucket, loc.key + "/")
        return loc

    def upload(self, items: list[UploadItem], base: StorageLocation, progress: TransferProgress, *,
               verify_listing: bool) -> None:
        """obstore moves the bytes wherever it reaches the bucket as botocore does (storage.obstore.uploads: each
        PUT's ETag verifies it, no listing needed); the botocore path (storage.botocore.uploads) serves the rest."""
        remote = self.remote
        with storage_errors("upload", base.uri, remote):
            settings = obstore_store.obstore_settings(remote, base.bucket) if items else None
            if settings is not None:
                # lazy: obstore is optional (botocore moves the bytes without it)
                from operators.storage.obstore.uploads import upload_files_obstore

                upload_files_obstore(settings, remote, base, items, progress, self.tuning)
                return
            from operators.storage.botocore.uploads import upload_files  # lazy: the botocore engine (s3transfer, botocore's retries), for the connections obstore does not serve

            concurrency = self.tuning.concurrency
            list_landed = (lambda: list_prefix(remote, concurrency, base, base.key)) if verify_listing else None
            upload_files(remote, base, items, progress, self.tuning, list_landed)

    def can_stream_upload(self, loc: StorageLocation) -> bool:
        return bool(loc.key) and not loc.key.endswith("/")

    def upload_stream(self, loc: StorageLocation, produce, progress: TransferProgress) -> int:
        remote = self.remote
        with storage_errors("upload", loc.uri, remote):
            settings = obstore_store.obstore_settings(remote, loc.bucket)
            if settings is not None:
                # lazy: obstore is optional (botocore moves the bytes without it)
                from operators.storage.obstore.uploads import upload_stream_obstore

                return upload_stream_obstore(settings, remote, loc, produce, progress, self.tuning)
            from operators.storage.botocore.stream import upload_stream  # lazy: the botocore engine (s3transfer, botocore's retries), for the connections obstore does not serve

            return upload_stream(remote, loc, produce, progress, self.tuning.transfer_config())

    def read_bytes(self, loc: StorageLocation) -> bytes:
        remote = self.remote
        from operators.storage.botocore.small_objects import read_object  # lazy: botocore's client and retries

        with storage_errors("read", loc.uri, remote):
            return read_object(remote, loc)

    def write_bytes(self, loc: StorageLocation, data: bytes) -> None:
        if not loc.key or loc.key.endswith("/"):
            raise StorageError(f"cannot write to {loc.uri}: it names a prefix; give an object key", permanent=True)
        remote = self.remote
        from operators.storage.botocore.small_objects import put_object  # lazy: botocore's client and retries

        with storage_errors("write", loc.uri, remote):
            put_object(remote, loc, data)

    def delete(self, loc: StorageLocation, listing: Callable[[], ObjectListing]) -> int:
        if not loc.key:
            raise StorageError(f"refusing to delete the whole bucket {loc.uri}; give a prefix", permanent=True)
        keys = [o.key for o in listing().objects]
        remote = self.remote
        from operators.storage.botocore.small_objects import delete_keys  # lazy: botocore's client and retries

        with storage_errors("delete", loc.uri, remote):
            return delete_keys(remote, loc, keys)

    def presigned_url(self, loc: StorageLocation, expires_seconds: int) -> str:
        remote = self.remote
        with storage_errors("presign", loc.uri, remote):
            return remote.client.generate_presigned_url(
                "get_object", Params={"Bucket": loc.bucket, "Key": loc.key}, ExpiresIn=int(expires_seconds))


__all__ = ["LocalStore", "RemoteStore", "Store", "UploadItem", "storage_errors"]

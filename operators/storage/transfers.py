"""What the transfer engines of ObjectStorageHook share: their tuning, temp names and checks, worker threads,
s3transfer subscribers, and local copies.

The engines themselves: storage.downloads (objects to files), storage.uploads (files to objects), storage.stream
(bytes to an object while they are produced). Whatever lands is verified (size always, MD5 where the ETag is a plain
MD5) and renamed from a temp name to its final name only then: nothing partial or unverified is ever visible under
a final name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from operators.storage.client import Remote
from operators.storage.retries import BODY_ATTEMPTS
from operators.storage.errors import StorageError
from operators.storage.location import (
    ObjectInfo,
)
from operators.storage.progress import TransferProgress

log = logging.getLogger("operators.storage.hook")

IO_CHUNK = 1024 * 1024
MAX_DOWNLOAD_PART = 64 * 1024 * 1024


@dataclass(frozen=True)
class TransferTuning:
    """The [training] transfer settings, as the engines need them."""

    concurrency: int
    multipart_threshold: int
    multipart_chunksize: int

    def transfer_config(self, *, part_size: int | None = None):
        from s3transfer.manager import TransferConfig

        return TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=part_size or self.multipart_chunksize,
            max_request_concurrency=self.concurrency,
            # 1 MiB reads from the response body instead of 256 KiB: a quarter of the Python calls per byte.
            io_chunksize=IO_CHUNK,
            # At most 32 MiB of downloaded chunks waiting for the disk: with 256 (~the defaults) a 2 GiB download
            # peaked at +370 MB over the process when the disk was slower than the network (bench/README.md).
            max_io_queue_size=32,
            # A ranged GET whose body breaks off is retried by s3transfer itself (botocore does not): as often as
            # our own small-object downloads retry theirs (storage.retries).
            num_download_attempts=BODY_ATTEMPTS,
        )

    def download_part_size(self, largest: int) -> int:
        """Range size for ranged downloads: the configured chunk size, grown so that the largest object takes
        about `concurrency` ranges (capped at 64 MiB). Every connection is still busy, with fewer requests:
        each costs ~2 ms of client CPU, and stores that serve a range by reading the whole object (moto,
        some gateways) pay per range a full read of it (a 512 MiB object in 8 MiB ranges: 64 full reads)."""
        wanted = -(-largest // max(1, self.concurrency))  # ceil
        wanted = -(-wanted // IO_CHUNK) * IO_CHUNK  # whole MiB
        return max(self.multipart_chunksize, min(wanted, MAX_DOWNLOAD_PART))


# ---------------------------------------------------------------------------------------------------------------
# small helpers


def md5_file(path: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(IO_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def temp_name(final_path: str) -> str:
    """A sibling temp name (same directory => same file system => os.replace is atomic)."""
    directory, name = os.path.split(final_path)
    return os.path.join(directory, f".{name}.part-{os.urandom(4).hex()}")


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        log.debug("could not remove temporary file %s", path, exc_info=True)


def etag_is_not_md5(remote: Remote, bucket: str, key: str) -> bool:
    """Objects encrypted with SSE-KMS / SSE-C have 32-hex ETags that are not the MD5 of the content."""
    try:
        head = remote.client.head_object(Bucket=bucket, Key=key)
    except Exception:  # noqa: BLE001 - fall back to treating the ETag as an MD5
        return False
    return head.get("ServerSideEncryption") == "aws:kms" or bool(head.get("SSECustomerAlgorithm"))


def make_parent_dirs(finals: Iterable[str]) -> None:
    for directory in {os.path.dirname(final) for final in finals}:
        os.makedirs(directory, exist_ok=True)


class FirstError:
    """The first failure of a group of worker threads; the others stop taking new work once it is set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def set(self, err: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = err
        self.stop.set()

    def raise_if_set(self) -> None:
        if self.error is not None:
            raise self.error


def run_workers(count: int, work: Callable[[], None], name: str, errors: FirstError) -> list[threading.Thread]:
    """Start `count` daemon threads running `work` (daemon: a killed task never hangs on them)."""

    def guarded() -> None:
        try:
            work()
        except BaseException as err:  # noqa: BLE001 - handed to the caller through `errors`
            errors.set(err)

    threads = [threading.Thread(target=guarded, name=f"{name}-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def join_workers(threads: list[threading.Thread], errors: FirstError) -> None:
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        errors.stop.set()  # the task is being killed: let the workers finish their current object and quit
        raise


# ---------------------------------------------------------------------------------------------------------------
# s3transfer subscribers


def subscriber_classes():
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
# local copies


def copy_local_files(targets: list[tuple[Any, str]], progress: TransferProgress, concurrency: int) -> None:
    """Copy (source ObjectInfo / path, final path) pairs in parallel, each via a temp name + rename."""

    def copy_one(source: str, final: str, expected_size: int | None) -> None:
        os.makedirs(os.path.dirname(final), exist_ok=True)
        temp = temp_name(final)
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
            remove_quietly(temp)
            raise
        progress.add_bytes(size)
        progress.add_file()

    with ThreadPoolExecutor(max_workers=min(concurrency, 8), thread_name_prefix="copy") as pool:
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


__all__ = [
    "IO_CHUNK",
    "TransferTuning",
    "copy_local_files",
    "etag_is_not_md5",
    "md5_file",
    "remove_quietly",
    "temp_name",
]


# Both engines (downloads.py, obstore_downloads.py) fetch a body again this many times when it arrives whole but wrong.
MISMATCH_ATTEMPTS = 3

def body_mismatch(written: int, digest, info: ObjectInfo, uri: str, remote: Remote, bucket: str) -> StorageError | None:
    """What is wrong with a downloaded body (size, then MD5 where the ETag is one), or None."""
    if written != info.size:
        return StorageError(
            f"downloaded {uri} has {written} bytes but the listing said {info.size}; the object changed or the "
            f"transfer was cut short, {MISMATCH_ATTEMPTS} times; retry the task"
        )
    if digest is not None and digest.hexdigest() != info.etag and not etag_is_not_md5(remote, bucket, info.key):
        return StorageError(
            f"downloaded {uri} has MD5 {digest.hexdigest()} but its ETag is {info.etag}; the transfer was "
            f"corrupted or the object changed, {MISMATCH_ATTEMPTS} times; retry the task"
        )
    return None

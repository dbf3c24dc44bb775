"""Moving bytes for ObjectStorageHook: parallel downloads and uploads against one S3 client, local copies, checks.

Two download paths, chosen per object by the multipart threshold:
- Objects below it (the many-small-files case: datasets of images, shards, CSV parts) are fetched by a pool of
  worker threads, one GetObject each, streamed into a temp file while their MD5 is computed, then checked and
  renamed. s3transfer's per-transfer machinery (a future, a submission task, an IO queue and its thread, up to
  four subscriber callbacks, a second read of the file for the MD5) cost ~3.5 ms of CPU per object here, more
  than botocore's request itself (~2 ms): with the GIL that capped us at ~170 objects/s, below `aws s3 sync`.
  The requests still go through the same boto3 client (signing, standard-mode retries); body read errors,
  which botocore does not retry, are retried here as s3transfer does.
- Objects at or above it go through s3transfer's TransferManager: parallel ranged GETs within each object.
Both run at the same time, so a channel of one huge file and many small ones keeps the connection pool busy.

Whatever lands is verified (size always, MD5 where the ETag is a plain MD5) and renamed from a temp name to its
final name only then: nothing partial or unverified is ever visible under a final name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from operators.hooks.storage_client import MAX_ATTEMPTS, Remote
from operators.hooks.storage_errors import StorageError, translate_error
from operators.hooks.storage_location import (
    ObjectInfo,
    StorageLocation,
    is_md5_etag,
    normalize_etag,
)
from operators.hooks.transfer_progress import TransferProgress

log = logging.getLogger("operators.hooks.object_storage")

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


def _make_parent_dirs(finals: Iterable[str]) -> None:
    for directory in {os.path.dirname(final) for final in finals}:
        os.makedirs(directory, exist_ok=True)


class _FirstError:
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


def _run_workers(count: int, work: Callable[[], None], name: str, errors: _FirstError) -> list[threading.Thread]:
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


def _join(threads: list[threading.Thread], errors: _FirstError) -> None:
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        errors.stop.set()  # the task is being killed: let the workers finish their current object and quit
        raise


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
# downloads


def _retryable_body_errors() -> tuple[type[BaseException], ...]:
    import botocore.exceptions as bx

    return (
        socket.timeout,
        ConnectionError,
        bx.ReadTimeoutError,
        bx.IncompleteReadError,
        bx.ResponseStreamingError,
        bx.ConnectionClosedError,
    )


def download_objects(
    remote: Remote,
    loc: StorageLocation,
    targets: list[tuple[ObjectInfo, str]],
    progress: TransferProgress,
    tuning: TransferTuning,
) -> None:
    """Download (object, final path) pairs of bucket `loc.bucket`; raises the first failure as a StorageError."""
    small = [t for t in targets if t[0].size < tuning.multipart_threshold]
    large = [t for t in targets if t[0].size >= tuning.multipart_threshold]
    _make_parent_dirs(final for _, final in targets)
    errors = _FirstError()
    if large:
        from s3transfer.manager import TransferManager

        part_size = tuning.download_part_size(max(info.size for info, _ in large))
        pending: _PendingLarge | None = None
        try:
            with TransferManager(remote.client, tuning.transfer_config(part_size=part_size)) as manager:
                pending = _submit_large(manager, remote, loc, large, progress, errors)
                _download_small(remote, loc, small, progress, tuning, errors)
                if errors.error is not None:
                    # Leaving the block by an exception makes the manager cancel what is in flight. Not
                    # manager.shutdown(cancel=True): s3transfer passes its arguments shifted there (cancel as the
                    # message, the message as the exception class), and the TypeError "'str' object is not
                    # callable" it raises would replace the real error.
                    raise _Cancelled()
        except _Cancelled:
            pass
        finally:
            if pending is not None:
                pending.finish(errors)
    else:
        _download_small(remote, loc, small, progress, tuning, errors)
    errors.raise_if_set()


class _Cancelled(Exception):
    """Internal: another object failed; the TransferManager is to cancel its transfers (see download_objects)."""


def _download_small(
    remote: Remote,
    loc: StorageLocation,
    targets: list[tuple[ObjectInfo, str]],
    progress: TransferProgress,
    tuning: TransferTuning,
    errors: _FirstError,
) -> None:
    if not targets:
        return
    retryable = _retryable_body_errors()
    queue = iter(targets)
    queue_lock = threading.Lock()

    def work() -> None:
        while not errors.stop.is_set():
            with queue_lock:
                item = next(queue, None)
            if item is None:
                return
            info, final = item
            uri = f"{loc.scheme}://{loc.bucket}/{info.key}"
            try:
                _get_one(remote, loc.bucket, info, final, uri, progress, retryable)
            except Exception as err:  # noqa: BLE001 - one line naming this object
                log.debug("download %s failed", uri, exc_info=True)
                raise translate_error(err, "download", uri, remote) from None

    _join(_run_workers(min(tuning.concurrency, len(targets)), work, "get", errors), errors)


def _get_one(
    remote: Remote,
    bucket: str,
    info: ObjectInfo,
    final: str,
    uri: str,
    progress: TransferProgress,
    retryable: tuple[type[BaseException], ...],
) -> None:
    """GetObject (If-Match the listed ETag) into a temp file with its MD5, verify, rename into place."""
    extra = {"IfMatch": f'"{info.etag}"'} if info.etag else {}
    check_md5 = is_md5_etag(info.etag)
    temp = temp_name(final)
    try:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            # botocore retries the request itself (standard mode); what breaks while reading the body is ours.
            body = remote.client.get_object(Bucket=bucket, Key=info.key, **extra)["Body"]
            written = 0
            digest = hashlib.md5(usedforsecurity=False) if check_md5 else None
            try:
                with open(temp, "wb") as fh:
                    if info.size <= IO_CHUNK:
                        chunks: Iterable[bytes] = (body.read(),)  # one read; botocore checks the length
                    else:
                        chunks = iter(lambda: body.read(IO_CHUNK), b"")
                    for chunk in chunks:
                        fh.write(chunk)
                        if digest is not None:
                            digest.update(chunk)
                        written += len(chunk)
                        progress.add_bytes(len(chunk))
                break
            except retryable:
                progress.add_bytes(-written)
                if attempt == MAX_ATTEMPTS:
                    raise
                log.debug("reading %s was interrupted (attempt %d); retrying", uri, attempt)
        if written != info.size:
            raise StorageError(
                f"downloaded {uri} has {written} bytes but the listing said {info.size}; the object changed or the "
                "transfer was cut short; retry the task"
            )
        if digest is not None and digest.hexdigest() != info.etag and not etag_is_not_md5(remote, bucket, info.key):
            raise StorageError(
                f"downloaded {uri} has MD5 {digest.hexdigest()} but its ETag is {info.etag}; the transfer was "
                "corrupted or the object changed; retry the task"
            )
        os.replace(temp, final)
    except BaseException:
        remove_quietly(temp)
        raise
    progress.add_file()


class _PendingLarge:
    """Large downloads submitted to a TransferManager, and the checks that run as each one finishes."""

    def __init__(self, verify_pool: ThreadPoolExecutor) -> None:
        self.verify_pool = verify_pool
        self.checks: list[Future] = []
        self.temps: list[str] = []
        self.lock = threading.Lock()

    def finish(self, errors: _FirstError) -> None:
        """Wait for the verifications (the manager has finished its transfers); clean up temp files."""
        try:
            self.verify_pool.shutdown(wait=True)
            for check in self.checks:
                try:
                    check.result()
                except BaseException as err:  # noqa: BLE001 - the first one is raised by the caller
                    errors.set(err)
        finally:
            self.verify_pool.shutdown(wait=True, cancel_futures=True)
            for temp in self.temps:
                remove_quietly(temp)


def _submit_large(manager, remote: Remote, loc: StorageLocation, targets, progress, errors: _FirstError) -> _PendingLarge:
    KnownObject, Progress, OnDone = _subscriber_classes()
    # Checking MD5s must not run on s3transfer's single IO thread: a small pool of its own.
    pending = _PendingLarge(ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="verify"))

    def finish_one(info: ObjectInfo, temp: str, final: str, future) -> None:
        uri = f"{loc.scheme}://{loc.bucket}/{info.key}"
        try:
            future.result()  # re-raises the transfer's error
            _verify_file(temp, info, uri, remote, loc.bucket)
            os.replace(temp, final)
        except Exception as err:  # noqa: BLE001
            log.debug("download %s failed", uri, exc_info=True)
            raise translate_error(err, "download", uri, remote) from None
        progress.add_file()

    def on_done_for(info: ObjectInfo, temp: str, final: str):
        def on_done(future) -> None:
            try:
                future.result()
            except BaseException:  # noqa: BLE001 - reported by finish_one
                errors.stop.set()
            with pending.lock:
                pending.checks.append(pending.verify_pool.submit(finish_one, info, temp, final, future))

        return on_done

    for info, final in targets:
        if errors.stop.is_set():
            break  # stop submitting; the first error is raised by the caller
        temp = temp_name(final)
        pending.temps.append(temp)
        manager.download(
            loc.bucket,
            info.key,
            temp,
            subscribers=[KnownObject(info.size, info.etag), Progress(progress), OnDone(on_done_for(info, temp, final))],
        )
    return pending


def _verify_file(path: str, info: ObjectInfo, uri: str, remote: Remote | None, bucket: str) -> None:
    size = os.path.getsize(path)
    if size != info.size:
        raise StorageError(
            f"downloaded {uri} has {size} bytes but the listing said {info.size}; the object changed or the "
            "transfer was cut short; retry the task"
        )
    if remote is not None and is_md5_etag(info.etag):
        digest = md5_file(path)
        if digest != info.etag and not etag_is_not_md5(remote, bucket, info.key):
            raise StorageError(
                f"downloaded {uri} has MD5 {digest} but its ETag is {info.etag}; the transfer was corrupted "
                "or the object changed; retry the task"
            )


# ---------------------------------------------------------------------------------------------------------------
# uploads


def upload_files(
    remote: Remote,
    base: StorageLocation,
    items: list[tuple[str, StorageLocation, int]],
    progress: TransferProgress,
    tuning: TransferTuning,
    list_landed: Callable[[], list[ObjectInfo]] | None,
) -> None:
    """Upload (local path, location, size) triples through s3transfer, then verify what landed.

    `list_landed` lists the destination prefix (one LIST instead of a HEAD per object when many were sent).
    """
    from s3transfer.manager import TransferManager

    _, Progress, OnDone = _subscriber_classes()
    transfer_config = tuning.transfer_config()

    def on_done(future) -> None:
        try:
            future.result()
        except BaseException:  # noqa: BLE001 - the error is raised from result() below
            return
        progress.add_file()

    futures = []
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
                raise translate_error(err, "upload", loc.uri, remote) from None
    # Verify what landed: sizes always, MD5 for single-part uploads (their ETag is the MD5).
    try:
        if list_landed is not None and len(items) > 1:
            landed = {o.key: o for o in list_landed()}
        else:
            landed = {}
            for _path, loc, _size in items:
                head = remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
                landed[loc.key] = ObjectInfo(loc.key, "", int(head["ContentLength"]), normalize_etag(head.get("ETag")))
    except StorageError:
        raise
    except Exception as err:  # noqa: BLE001
        log.debug("verify upload to %s failed", base.uri, exc_info=True)
        raise translate_error(err, "verify upload to", base.uri, remote) from None
    for path, loc, size in items:
        info = landed.get(loc.key)
        if info is None or info.size != size:
            raise StorageError(
                f"uploaded {loc.uri} but it has {'no object' if info is None else f'{info.size} bytes'} "
                f"instead of {size}; retry the task"
            )
        if size < transfer_config.multipart_threshold and is_md5_etag(info.etag):
            digest = md5_file(path)
            if digest != info.etag and not etag_is_not_md5(remote, loc.bucket, loc.key):
                raise StorageError(
                    f"uploaded {loc.uri} has ETag {info.etag} but the local file's MD5 is {digest}; retry the task"
                )


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
    "download_objects",
    "etag_is_not_md5",
    "md5_file",
    "remove_quietly",
    "temp_name",
    "upload_files",
]

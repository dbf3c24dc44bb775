"""Downloads through botocore for ObjectStorageHook: the objects of a listing to files, in parallel, against one S3
client (where storage.obstore.store.obstore_settings keeps a bucket on botocore; RemoteStore.download chooses).

Two download paths, chosen per object by the multipart threshold:
- Objects below it (the many-small-files case: datasets of images, shards, CSV parts) are fetched by a pool of
  worker threads, one GetObject each, streamed into a temp file while their check is computed (the full-object CRC
  the store answered, else the MD5: storage.checksums), then checked and renamed. s3transfer's per-transfer machinery (a future, a submission task, an IO queue and its thread, up to
  four subscriber callbacks, a second read of the file for the MD5) cost ~3.5 ms of CPU per object here, more
  than botocore's request itself (~2 ms): with the GIL that capped us at ~170 objects/s, below `aws s3 sync`.
  The requests still go through the same boto3 client (signing, standard-mode retries); body read errors,
  which botocore does not retry, are retried here as s3transfer does.
- Objects at or above it go through s3transfer's TransferManager: parallel ranged GETs within each object.
Both run at the same time, so a channel of one huge file and many small ones keeps the connection pool busy.

Whatever lands is verified (size always, then the store's full-object CRC where it keeps one, else MD5 where the
ETag is a plain MD5) and renamed from a temp name to its final name only then: nothing partial or unverified is ever
visible under a final name.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable

from s3transfer.manager import TransferManager

from operators.storage import checksums
from operators.storage.botocore.subscribers import subscriber_classes
from operators.storage.errors import translate_error
from operators.storage.location import ObjectInfo, StorageLocation
from operators.storage.progress import TransferProgress
from operators.storage.remote import Remote
from operators.storage.remote_retries import body_errors
from operators.storage.retries import BODY_ATTEMPTS, backoff_seconds
from operators.storage.transfers import (
    IO_CHUNK,
    MISMATCH_ATTEMPTS,
    TransferTuning,
    body_check,
    body_mismatch,
    make_parent_dirs,
    remove_quietly,
    temp_name,
    verify_file,
)

log = logging.getLogger("operators.storage.hook")

# A body that arrives whole but wrong is rare in transit; every time means the object or the store is at fault.


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
    make_parent_dirs(final for _, final in targets)
    errors = FirstError()
    if large:
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


class _Cancelled(Exception):
    """Internal: another object failed; the TransferManager is to cancel its transfers (see download_objects)."""


def _download_small(
    remote: Remote,
    loc: StorageLocation,
    targets: list[tuple[ObjectInfo, str]],
    progress: TransferProgress,
    tuning: TransferTuning,
    errors: FirstError,
) -> None:
    if not targets:
        return
    retryable = body_errors()
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

    join_workers(run_workers(min(tuning.concurrency, len(targets)), work, "get", errors), errors)


def _get_one(
    remote: Remote,
    bucket: str,
    info: ObjectInfo,
    final: str,
    uri: str,
    progress: TransferProgress,
    retryable: tuple[type[BaseException], ...],
) -> None:
    """GetObject (If-Match the listed ETag) into a temp file with its CRC or MD5 (transfers.body_check), verify,
    rename into place.

    botocore retries the request (storage.retries); a body that breaks off is retried here BODY_ATTEMPTS times, and
    one that arrives whole but with the wrong size, CRC or MD5 (cut short or corrupted on the way: If-Match rules out
    a changed object) MISMATCH_ATTEMPTS times, each after a jittered backoff.
    """
    extra = {"IfMatch": f'"{info.etag}"'} if info.etag else {}
    temp = temp_name(final)
    try:
        attempt = mismatches = 0
        while True:
            attempt += 1
            response = remote.client.get_object(Bucket=bucket, Key=info.key, **extra)
            body = response["Body"]
            written = 0
            stored = checksums.from_response(response)  # the GET asked for it (client.install_checksums)
            digest = body_check(info, stored)
            try:
                with open(temp, "wb") as fh:
                    read = body.read
                    chunks: Iterable[bytes] = (read(),) if info.size <= IO_CHUNK else iter(lambda: read(IO_CHUNK), b"")
                    for chunk in chunks:
                        fh.write(chunk)
                        if digest is not None:
                            digest.update(chunk)
                        written += len(chunk)
                        progress.add_bytes(len(chunk))
            except retryable:
                progress.add_bytes(-written)
                if attempt >= BODY_ATTEMPTS:
                    raise
                log.debug("reading %s was interrupted (attempt %d); retrying", uri, attempt)
                time.sleep(backoff_seconds(attempt))
                continue
            problem = body_mismatch(written, digest, info, uri, remote, bucket, stored)
            if problem is None:
                break
            mismatches += 1
            progress.add_bytes(-written)
            if mismatches >= MISMATCH_ATTEMPTS or attempt >= BODY_ATTEMPTS:
                raise problem
            log.debug("%s (attempt %d); retrying", problem, attempt)
            time.sleep(backoff_seconds(attempt))
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

    def finish(self, errors: FirstError) -> None:
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


def _submit_large(manager, remote: Remote, loc: StorageLocation, targets, progress, errors: FirstError) -> _PendingLarge:
    KnownObject, Progress, OnDone = subscriber_classes()
    # Checking CRCs and MD5s must not run on s3transfer's single IO thread: a small pool of its own.
    pending = _PendingLarge(ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="verify"))

    def finish_one(info: ObjectInfo, temp: str, final: str, future) -> None:
        uri = f"{loc.scheme}://{loc.bucket}/{info.key}"
        try:
            future.result()  # re-raises the transfer's error
            verify_file(temp, info, uri, remote, loc.bucket, _stored_checksum(remote, loc.bucket, info))
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


def _stored_checksum(remote: Remote, bucket: str, info: ObjectInfo) -> checksums.Stored | None:
    """The full-object checksum of a large object, from a HEAD (If-Match the listed ETag; ranged GETs answer none).

    s3transfer writes the ranges from its IO thread, in any order, so the file is read once more to check it: a CRC
    in C at the speed of the page cache, where an MD5 (only a single-part object has one) costs ~1.7 ms per MiB."""
    extra = {"IfMatch": f'"{info.etag}"'} if info.etag else {}
    return checksums.from_response(remote.client.head_object(Bucket=bucket, Key=info.key, **extra))


__all__ = ["download_objects"]

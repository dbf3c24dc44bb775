"""Uploading bytes while they are being produced (an archive while it is packed) through botocore, for
ObjectStorageHook (where storage.obstore.store.obstore_settings keeps a bucket on botocore; else
storage.obstore.uploads.upload_stream_obstore).

`upload_stream` runs the producer on a thread of its own, writing into a pipe that s3transfer reads as a
non-seekable stream: s3transfer cuts it into parts and uploads each part as soon as it is full (a single PutObject
when the whole stream is below the multipart threshold). So packing and uploading overlap, and what is in memory
is bounded by s3transfer's part buffers (at most `max_in_memory_upload_chunks` parts), whatever the size.

Where the store takes checksums (storage.botocore.uploads.store_takes_checksums), the upload stores a full-object
CRC64NVME: each part carries its own (a header computed by storage.remote), the store composes the whole
object's, and the HEAD after the upload checks it against the CRC of everything written (computed in C on the way,
where the MD5 it replaces would cost ~1.7 ms per MiB).

Failure either way ends both sides: a producer that fails makes the stream raise instead of ending (s3transfer then
aborts the multipart upload, so no truncated object ever becomes visible), and an upload that fails closes the
pipe, so the producer's next write raises instead of blocking for ever.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
from typing import Callable

from s3transfer.manager import TransferManager

from operators.storage import checksums
from operators.storage.botocore.uploads import store_takes_checksums
from operators.storage.errors import StorageError, translate_error
from operators.storage.leftover_uploads import abort_leftover_uploads
from operators.storage.location import StorageLocation, is_md5_etag, normalize_etag
from operators.storage.progress import TransferProgress
from operators.storage.remote import Remote
from operators.storage.transfers import etag_hides_md5

log = logging.getLogger("operators.storage.hook")

_F_SETPIPE_SZ = 1031  # Linux: grow the pipe to 1 MiB (64 KiB by default): fewer wake-ups per part
_PIPE_SIZE = 1024 * 1024


class _StreamStopped(Exception):
    """Raised to s3transfer from the stream: the producer failed (the upload must not complete) or the upload did."""


class _StreamReader:
    """The read end of the pipe as s3transfer sees it: EOF only when the producer finished cleanly.

    Once the transfer has failed (a part was refused, say), reading stops: s3transfer would otherwise go on
    reading the whole stream, skipping every part, and the producer would pack everything for nothing.
    """

    def __init__(self, fd: int, failed: Callable[[], BaseException | None]) -> None:
        self._file = os.fdopen(fd, "rb", buffering=_PIPE_SIZE)
        self._failed = failed
        self.future = None  # the s3transfer TransferFuture reading this stream

    def read(self, amount: int = -1) -> bytes:
        if self.future is not None and self.future.done():
            raise _StreamStopped("the upload has already failed")
        data = self._file.read(amount)
        if (not data or (amount > 0 and len(data) < amount)) and self._failed() is not None:
            raise _StreamStopped("the data being uploaded could not be produced")
        return data

    def close(self) -> None:
        self._file.close()


class _Writer:
    """What the producer writes to: the pipe, counting bytes, with the CRC64NVME of everything written where the
    store keeps one, else the MD5 while the stream is one part long (a single PUT's ETag)."""

    def __init__(self, fd: int, progress: TransferProgress, md5_limit: int, with_checksums: bool) -> None:
        self._fd = fd
        self._progress = progress
        self._md5_limit = md5_limit if not with_checksums else 0
        self.size = 0
        self.digest = hashlib.md5(usedforsecurity=False)
        self.crc = checksums.Running() if with_checksums else None

    def write(self, data) -> int:
        view = memoryview(data)
        if self.crc is not None:
            self.crc.update(view)
        elif self.size < self._md5_limit:
            self.digest.update(view)
        while view:
            written = os.write(self._fd, view)  # BrokenPipeError once the uploader has given up
            view = view[written:]
        self.size += len(data)
        self._progress.add_bytes(len(data))
        return len(data)


def upload_stream(
    remote: Remote,
    loc: StorageLocation,
    produce: Callable[[Callable[[bytes], int]], None],
    progress: TransferProgress,
    transfer_config,
) -> int:
    """Upload to `loc` whatever `produce(write)` writes, while it writes; returns the number of bytes.

    Raises the producer's own exception if it failed (the upload is then aborted), a StorageError if the upload
    failed or what landed is not what was written.
    """
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(write_fd, _F_SETPIPE_SZ, _PIPE_SIZE)
    except OSError:
        pass  # a smaller pipe works, with more wake-ups
    with_checksums = store_takes_checksums(remote, loc.bucket, loc.key)
    writer = _Writer(write_fd, progress, transfer_config.multipart_threshold, with_checksums)
    produced: list[BaseException] = []
    reader = _StreamReader(read_fd, lambda: produced[0] if produced else None)

    def run_producer() -> None:
        try:
            produce(writer.write)
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            produced.append(err)
        finally:
            os.close(write_fd)

    producer = threading.Thread(target=run_producer, name="upload-producer", daemon=True)
    producer.start()
    try:
        with TransferManager(remote.client, transfer_config) as manager:
            extra = dict(checksums.UPLOAD_ARGS) if with_checksums else {}
            reader.future = manager.upload(reader, loc.bucket, loc.key, extra_args=extra)
            reader.future.result()
    except BaseException as err:
        reader.close()  # the producer's next write fails: it stops instead of waiting for a reader
        producer.join()
        if writer.size >= transfer_config.multipart_threshold:
            abort_leftover_uploads(remote, loc.bucket, [loc.key])
        if produced and not isinstance(produced[0], BrokenPipeError):
            raise produced[0] from None
        if isinstance(err, Exception):
            log.debug("upload %s failed", loc.uri, exc_info=True)
            raise translate_error(err, "upload", loc.uri, remote) from None
        raise
    reader.close()
    producer.join()
    if writer.size >= transfer_config.multipart_threshold:
        abort_leftover_uploads(remote, loc.bucket, [loc.key])  # a lost CreateMultipartUpload response's upload
    if produced:
        raise produced[0]
    _verify(remote, loc, writer)
    progress.add_file()
    return writer.size


def _verify(remote: Remote, loc: StorageLocation, writer: _Writer) -> None:
    try:
        head = remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
    except Exception as err:  # noqa: BLE001
        raise translate_error(err, "verify upload to", loc.uri, remote) from None
    size, etag = int(head["ContentLength"]), normalize_etag(head.get("ETag"))
    if size != writer.size:
        raise StorageError(f"uploaded {loc.uri} but it has {size} bytes instead of {writer.size}; retry the task")
    stored = checksums.from_response(head)
    if writer.crc is not None:
        if stored is not None and stored.algorithm is writer.crc.algorithm and stored.value != writer.crc.value:
            raise StorageError(f"uploaded {loc.uri} has {stored.describe()} but what was written has "
                               f"{stored.describe(writer.crc.value)}; retry the task")
        return
    if writer.size <= writer._md5_limit and is_md5_etag(etag) and writer.digest.hexdigest() != etag:
        if not etag_hides_md5(head):
            raise StorageError(
                f"uploaded {loc.uri} has ETag {etag} but what was written has MD5 {writer.digest.hexdigest()}; "
                "retry the task"
            )


__all__ = ["upload_stream"]

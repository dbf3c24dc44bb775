"""Uploads through obstore (the Rust `object_store` crate): the engine of RemoteStore's uploads wherever
`obstore.store.obstore_settings` says obstore reaches the bucket as botocore does (else storage.botocore.uploads /
storage.botocore.stream).

Why: botocore builds and signs every request in Python (~4 ms of client CPU per small object, serialised by the
GIL); object_store signs and sends in Rust on one event loop (bench/README.md, "Uploads through obstore").
What stays ours, with the guarantees of the botocore path:

- files below the multipart threshold are one PUT each, read and hashed (MD5) here, `concurrency` in flight;
  files at or above it are multipart uploads fed part by part from an async generator (exactly `part` bytes per
  part), so memory is bounded by the parts in flight (PART_BUDGET);
- a stream (an archive while it is packed) goes up the same way: the producer's writes are cut into parts that
  queue up (storage.obstore.part_queue, STREAM_READ_AHEAD parts at most) while object_store sends the ones before, each
  part's MD5 computed on the way (it is read once); a stream that ends below the threshold is one PUT, as
  s3transfer does;
- verification: a single PUT's own ETag is the MD5 of its bytes, so it is checked without another request; a
  stream's multipart ETag is checked against the MD5 of its parts' MD5s ("-<parts>"); a file's multipart upload
  gets a HEAD and a size check, as on the botocore path (its part MD5s would cost ~1.7 ms of CPU per MiB, more than
  the rest of its upload; they are computed only after a lost completion, below); an ETag that is not what we
  expect (SSE-KMS or SSE-C, a store that makes multipart ETags its own way) falls back to the HEAD and the size;
- object_store retries each request (5xx incl. 503 SlowDown, 429, resets, timeouts) with backoff, but not the
  POSTs of a multipart upload (create, complete) whose response was lost: a transient failure is tried again here,
  a single PUT or a file's multipart upload from its start, a stream's while none of it was read;
- multipart uploads that fail are aborted by obstore itself; `storage.leftover_uploads.abort_leftover_uploads`
  (ListMultipartUploads) stays the safety net after every multipart upload (a lost CreateMultipartUpload response's
  upload);
- a CompleteMultipartUpload whose response was lost and whose retry got NoSuchUpload (MinIO, Ceph forget a
  completed upload) is a success when the object's ETag is the one our parts make (a file's read again for it);
- no checksum headers: object_store sends x-amz-checksum-* only when its `checksum_algorithm` is configured (SHA-256
  only), and obstore.store.make_store does not; what it adds besides the signature (x-amz-date, x-amz-content-sha256,
  x-amz-security-token) is what botocore's SigV4 sends too, so COS/OSS/OBS accept these PUTs as they accept botocore's;
- a file's CRC64NVME goes in its user metadata instead (x-amz-meta-crc64nvme, storage.checksums): obstore has no
  per-request headers, so the store's own full-object checksum cannot be sent, and this copy is what obstore
  downloads verify with instead of MD5. A stream below the multipart threshold is one PUT and carries it too. A
  multipart stream has none: its CRC is known only once it has been read, and user metadata goes with
  CreateMultipartUpload; the only way to add it afterwards, a copy of the object onto itself (CopyObject,
  MetadataDirective REPLACE), makes the store rewrite every byte (MinIO here: 1.44 s for 512 MiB, the object turned
  single-part) for a check on download, so its downloads are checked by size, as multipart objects were (its upload
  is verified by the MD5s of its parts).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import obstore

from operators.storage import checksums
from operators.storage.errors import StorageError, translate_error
from operators.storage.leftover_uploads import abort_leftover_uploads
from operators.storage.location import StorageLocation, is_md5_etag, normalize_etag
from operators.storage.obstore.part_queue import PartQueue
from operators.storage.obstore.store import (
    OFFLOAD_BYTES,
    make_store,
    run_coroutine,
    run_workers,
)
from operators.storage.progress import TransferProgress
from operators.storage.remote import EngineSettings, Remote
from operators.storage.retries import BODY_ATTEMPTS, backoff_seconds
from operators.storage.transfers import (
    IO_CHUNK,
    TransferTuning,
    UploadItem,
    etag_hides_md5,
)

log = logging.getLogger("operators.storage.hook")

# Bytes of multipart parts in flight (being sent, or read and waiting for a connection) across all large files:
# 4 parts of the default 8 MiB, fewer when parts are larger. 64 MiB was no faster against MinIO and peaked ~70 MB
# higher (1 x 256 MiB: 389 -> 316 MB; bench/README.md, "Uploads through obstore").
PART_BUDGET = 32 * 1024 * 1024
# S3's limit on the parts of one upload: a larger file gets larger parts (s3transfer does the same).
MAX_PARTS = 10_000
# Full parts of a stream waiting for object_store while the producer goes on (memory: this many parts more).
STREAM_READ_AHEAD = 2
# Bytes of small files held in memory at once (each is read whole, then PUT): `concurrency` files just under the
# multipart threshold would be 16 x 8 MiB; a checkpoint of many 4-7 MiB shards stays within this instead.
SMALL_FILE_BUDGET = 32 * 1024 * 1024


# -- parts ----------------------------------------------------------------------------------------------------------


@dataclass
class _Parts:
    """What went into a multipart upload: its size, each part's MD5 (so its ETag can be checked) and the CRC64NVME
    of all of it (C, ~0.02 ms per MiB: a file's is checked against the one its metadata recorded)."""

    hash: bool = True  # MD5 each part on the way (a stream: read once); a file's are computed when needed
    size: int = 0
    digests: list[bytes] = field(default_factory=list)
    crc: int = 0
    started: bool = False  # object_store has asked for the first part
    complete: bool = False  # ... and for everything (the parts are all of the object)

    def forget(self, progress: TransferProgress) -> None:
        """Before the same bytes are sent again (a retried upload of a file)."""
        progress.add_bytes(-self.size)
        self.size, self.digests, self.crc, self.started, self.complete = 0, [], 0, False, False

    @property
    def etag(self) -> str:
        return f"{hashlib.md5(b''.join(self.digests), usedforsecurity=False).hexdigest()}-{len(self.digests)}"


async def _cut_parts(read: Callable[[int], Awaitable[bytes]], first: bytes, part: int, parts: _Parts,
                     progress: TransferProgress):
    """Yield exactly `part` bytes at a time (the last part shorter) from `first` and then `read(n)` until it returns
    b"": object_store makes each yielded buffer one part, so part MD5s computed from them make its ETag.
    A read of a whole part is handed on as it is (a copy only where a part straddles two reads: large buffers
    cost page faults more than their bytes)."""
    parts.started = True
    pending = first
    ended = False
    while True:
        while not ended and len(pending) < part:
            data = await read(part - len(pending))
            if not data:
                ended = True
            else:
                pending = pending + data if pending else data
        if not pending:
            break
        chunk, pending = (pending[:part], pending[part:]) if len(pending) > part else (pending, b"")
        if parts.hash:
            parts.digests.append(await asyncio.to_thread(_md5, chunk))
        parts.crc = checksums.UPLOAD_ALGORITHM.compute(chunk, parts.crc)
        parts.size += len(chunk)
        progress.add_bytes(len(chunk))  # handed to object_store: at most the parts in flight ahead of the wire
        yield chunk
    parts.complete = True


def _md5(data) -> bytes:
    return hashlib.md5(data, usedforsecurity=False).digest()


def part_size(tuning: TransferTuning, size: int | None) -> int:
    """The configured part size, grown (whole MiB) so that a file of `size` fits in MAX_PARTS parts."""
    part = tuning.multipart_chunksize
    if size is not None and -(-size // part) > MAX_PARTS:
        part = -(-(-(-size // MAX_PARTS)) // IO_CHUNK) * IO_CHUNK
    return part


def _parts_in_flight(tuning: TransferTuning, part: int) -> int:
    return max(1, min(tuning.concurrency, PART_BUDGET // part))


# -- puts -----------------------------------------------------------------------------------------------------------


async def _put_single(store, remote: Remote, loc: StorageLocation, data: bytes,
                      attributes: dict[str, str] | None = None) -> str:
    """One PUT of `data` (with user metadata `attributes`); a transient failure after object_store's own retries is
    tried again. Returns the ETag."""
    attempt = 0
    while True:
        attempt += 1
        try:
            result = await obstore.put_async(store, loc.key, data, use_multipart=False, attributes=attributes)
            return normalize_etag(result.get("e_tag"))
        except Exception as err:  # noqa: BLE001 - translated below
            error = translate_error(err, "upload", loc.uri, remote)
            if attempt >= BODY_ATTEMPTS or error.permanent:
                log.debug("upload %s failed", loc.uri, exc_info=True)
                raise error from None
            log.debug("uploading %s failed (attempt %d): %s; retrying", loc.uri, attempt, err)
            await asyncio.sleep(backoff_seconds(attempt))


async def _put_multipart(store, remote: Remote, loc: StorageLocation, make_chunks, parts: _Parts, part: int,
                         in_flight: int, progress: TransferProgress, *, replayable: bool,
                         our_etag: Callable[[], str], attributes: dict[str, str] | None = None) -> str | None:
    """A multipart upload of what `make_chunks()` yields; returns the ETag (None: the store completed it but the
    response was lost, and the object's ETag is ours). Raises the failure as a StorageError otherwise.

    object_store retries each part, but not CreateMultipartUpload nor CompleteMultipartUpload after a lost
    response: a transient failure is tried again here, from the start, while nothing was read (a stream) or
    whenever the bytes can be read again (`replayable`: a file)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            result = await obstore.put_async(store, loc.key, make_chunks(), use_multipart=True, chunk_size=part,
                                             max_concurrency=in_flight, attributes=attributes)
            return normalize_etag(result.get("e_tag"))
        except _StreamStopped:
            raise
        except Exception as err:  # noqa: BLE001 - translated below
            error = translate_error(err, "upload", loc.uri, remote)
            if not error.permanent and parts.complete and \
                    await asyncio.to_thread(_landed_etag, remote, loc) == await asyncio.to_thread(our_etag):
                # CompleteMultipartUpload retried after a lost response: the store forgot the upload
                # (NoSuchUpload) but the object is there, made of exactly our parts.
                log.debug("completing %s was retried after a lost response; the object is complete", loc.uri)
                return None
            if error.permanent or attempt >= BODY_ATTEMPTS or (parts.started and not replayable):
                log.debug("upload %s failed", loc.uri, exc_info=True)
                raise error from None
            log.debug("uploading %s failed (attempt %d): %s; retrying", loc.uri, attempt, err)
            parts.forget(progress)
            await asyncio.sleep(backoff_seconds(attempt))


def _landed_etag(remote: Remote, loc: StorageLocation) -> str:
    try:
        return normalize_etag(remote.client.head_object(Bucket=loc.bucket, Key=loc.key).get("ETag"))
    except Exception:  # noqa: BLE001 - nothing there (or unreachable): the original failure stands
        return ""


def _verify(remote: Remote, loc: StorageLocation, etag: str | None, expected: str | None, size: int,
            what: str) -> None:
    """Check what landed: `etag` (the PUT's) against the `expected` one of the bytes we sent; where they differ,
    or nothing is expected (a file's multipart upload: its part MD5s cost more CPU than a HEAD), a HEAD decides:
    the size always, the MD5 of a single-part object unless SSE-KMS / SSE-C made its ETag no MD5 (some stores
    make multipart ETags their own way: size only)."""
    if etag is None or (expected is not None and etag == expected):
        return
    try:
        head = remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
    except Exception as err:  # noqa: BLE001
        log.debug("verify upload to %s failed", loc.uri, exc_info=True)
        raise translate_error(err, "verify upload to", loc.uri, remote) from None
    landed = int(head["ContentLength"])
    if landed != size:
        raise StorageError(f"uploaded {loc.uri} but it has {landed} bytes instead of {size}; retry the task")
    if expected is not None and "-" not in expected and is_md5_etag(etag) and not etag_hides_md5(head):
        raise StorageError(f"uploaded {loc.uri} has ETag {etag} but {what} has MD5 {expected}; retry the task")


# -- files ----------------------------------------------------------------------------------------------------------


def upload_files_obstore(settings: EngineSettings, remote: Remote, base: StorageLocation, items: list[UploadItem],
                         progress: TransferProgress, tuning: TransferTuning) -> None:
    """Upload (local path, location, size) triples of bucket `base.bucket`, verify each; raises a StorageError."""
    store = make_store(settings, base.bucket)
    multipart = [loc.key for _path, loc, size in items if size >= tuning.multipart_threshold]
    try:
        run_coroutine(_upload_all(store, remote, items, progress, tuning))
    finally:
        if multipart:  # below the threshold an object is one PUT: nothing can be left open
            abort_leftover_uploads(remote, base.bucket, multipart)


async def _upload_all(store, remote: Remote, items: list[UploadItem], progress: TransferProgress,
                      tuning: TransferTuning) -> None:
    small = [item for item in items if item[2] < tuning.multipart_threshold]
    large = sorted((item for item in items if item[2] >= tuning.multipart_threshold), key=lambda item: -item[2])
    # Large files share the part budget: one at a time gets all of it, several split it (each keeps >= 2 parts
    # going, so a checkpoint of many shards is not sent one part at a time).
    budget = _parts_in_flight(tuning, max((part_size(tuning, size) for _, _, size in large), default=1))
    large_workers = max(1, min(len(large), budget // 2))
    per_file = max(1, budget // large_workers)

    memory = _ByteBudget(SMALL_FILE_BUDGET)

    async def send_small(item: UploadItem) -> None:
        path, loc, size = item
        async with memory.holding(size):
            await _upload_small(store, remote, path, loc, size, progress)

    async def send_large(item: UploadItem) -> None:
        path, loc, size = item
        await _upload_large(store, remote, path, loc, size, progress, tuning, per_file)

    await run_workers((send_small, small, tuning.concurrency), (send_large, large, large_workers))


class _ByteBudget:
    """At most `limit` bytes held at once; one holder larger than the limit waits until it is alone."""

    def __init__(self, limit: int) -> None:
        self.limit = self.free = limit
        self._changed = asyncio.Condition()

    @asynccontextmanager
    async def holding(self, size: int):
        size = min(size, self.limit)
        async with self._changed:
            await self._changed.wait_for(lambda: self.free >= size)
            self.free -= size
        try:
            yield
        finally:
            async with self._changed:
                self.free += size
                self._changed.notify_all()


async def _upload_small(store, remote: Remote, path: str, loc: StorageLocation, size: int,
                        progress: TransferProgress) -> None:
    data, digest, crc = await asyncio.to_thread(_read_and_hash, path) if size >= OFFLOAD_BYTES else _read_and_hash(path)
    if len(data) != size:
        raise StorageError(f"cannot upload {loc.uri}: {path} changed while it was being uploaded ({len(data)} bytes "
                           f"instead of {size}); retry the task", permanent=False)
    etag = await _put_single(store, remote, loc, data, checksums.metadata(crc))
    if etag != digest:  # the usual case needs no request: the PUT answered the MD5 of what we sent
        await asyncio.to_thread(_verify, remote, loc, etag, digest, size, "the local file")
    progress.add_bytes(size)
    progress.add_file()


def _read_and_hash(path: str) -> tuple[bytes, str, int]:
    """A file's bytes, their MD5 (what the PUT's ETag must be) and their CRC64NVME (for downloads: its metadata)."""
    with open(path, "rb") as fh:
        data = fh.read()
    return data, _md5(data).hex(), checksums.UPLOAD_ALGORITHM.compute(data)


async def _upload_large(store, remote: Remote, path: str, loc: StorageLocation, size: int,
                        progress: TransferProgress, tuning: TransferTuning, in_flight: int) -> None:
    part = part_size(tuning, size)
    parts = _Parts(hash=False)

    async def file_chunks():
        with open(path, "rb", buffering=0) as fh:
            async def read(amount: int) -> bytes:
                return await asyncio.to_thread(fh.read, amount)

            async for chunk in _cut_parts(read, b"", part, parts, progress):
                yield chunk

    # Its CRC64NVME goes in the metadata sent when the upload starts: a read of the file first (C, ~0.1 ms per MiB
    # from the page cache), off the event loop.
    crc = await asyncio.to_thread(checksums.of_file, path)
    try:
        etag = await _put_multipart(store, remote, loc, file_chunks, parts, part, in_flight, progress,
                                    replayable=True, our_etag=lambda: _file_etag(path, part),
                                    attributes=checksums.metadata(crc))
    except BaseException:
        progress.add_bytes(-parts.size)
        raise
    if parts.size != size or (parts.complete and parts.crc != crc):
        what = f"{parts.size} bytes instead of {size}" if parts.size != size else "not the bytes its CRC64NVME was of"
        raise StorageError(f"cannot upload {loc.uri}: {path} changed while it was being uploaded ({what}); "
                           "retry the task")
    await asyncio.to_thread(_verify, remote, loc, etag, None, size, "the local file")
    progress.add_file()


def _file_etag(path: str, part: int) -> str:
    """The multipart ETag of `path` sent in parts of `part` bytes (read again: only after a lost response)."""
    parts = _Parts()
    with open(path, "rb") as fh:
        while chunk := fh.read(part):
            parts.digests.append(_md5(chunk))
    return parts.etag


# -- streams --------------------------------------------------------------------------------------------------------


class _StreamStopped(Exception):
    """Raised into object_store from the stream: the producer failed, so the upload must not complete."""


def upload_stream_obstore(settings: EngineSettings, remote: Remote, loc: StorageLocation,
                          produce: Callable[[Callable[[bytes], int]], None], progress: TransferProgress,
                          tuning: TransferTuning) -> int:
    """Upload to `loc` whatever `produce(write)` writes, while it writes (storage.botocore.stream's contract); returns
    the number of bytes. Raises the producer's own exception if it failed (nothing lands), a StorageError if the
    upload failed or what landed is not what was written."""
    store = make_store(settings, loc.bucket)
    part = part_size(tuning, None)
    parts_queue = PartQueue(part, ahead=STREAM_READ_AHEAD)
    produced: list[BaseException] = []

    def run_producer() -> None:
        try:
            produce(parts_queue.write)
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            produced.append(err)
            parts_queue.close(_StreamStopped("the data being uploaded could not be produced"))
        else:
            parts_queue.close()

    producer = threading.Thread(target=run_producer, name="upload-producer", daemon=True)
    producer.start()
    try:
        size, multipart = run_coroutine(_upload_stream(store, remote, loc, parts_queue, part, progress, tuning))
    except BaseException as err:
        parts_queue.stop()  # the producer's next write fails: it stops instead of waiting for the upload
        producer.join()
        if parts_queue.size >= tuning.multipart_threshold:
            abort_leftover_uploads(remote, loc.bucket, [loc.key])
        if produced and not isinstance(produced[0], BrokenPipeError):
            raise produced[0] from None
        if isinstance(err, _StreamStopped):
            raise StorageError(f"cannot upload {loc.uri}: the data being uploaded could not be produced") from None
        raise
    producer.join()
    if multipart:
        abort_leftover_uploads(remote, loc.bucket, [loc.key])  # a lost CreateMultipartUpload response's upload
    if produced:
        raise produced[0]
    progress.add_file()
    return size


async def _upload_stream(store, remote: Remote, loc: StorageLocation, parts_queue, part: int,
                         progress: TransferProgress, tuning: TransferTuning) -> tuple[int, bool]:
    first: list[bytes] = []
    while sum(map(len, first)) < tuning.multipart_threshold:
        chunk = await parts_queue.get()
        if chunk is None:  # the whole stream is below the threshold: one PUT, as s3transfer does
            data = b"".join(first)
            digest = (await asyncio.to_thread(_md5, data)).hex()
            etag = await _put_single(store, remote, loc, data,
                                     checksums.metadata(checksums.UPLOAD_ALGORITHM.compute(data)))
            if etag != digest:
                await asyncio.to_thread(_verify, remote, loc, etag, digest, len(data), "what was written")
            progress.add_bytes(len(data))
            return len(data), False
        first.append(chunk)
    parts = _Parts()

    async def stream_parts():
        parts.started = True
        chunk = first.pop(0) if first else await parts_queue.get()
        while chunk is not None:
            parts.digests.append(await asyncio.to_thread(_md5, chunk))
            parts.size += len(chunk)
            progress.add_bytes(len(chunk))  # handed to object_store: at most the parts in flight ahead of the wire
            yield chunk
            chunk = first.pop(0) if first else await parts_queue.get()
        parts.complete = True

    chunks = stream_parts()  # read once: retried only while nothing was read
    etag = await _put_multipart(store, remote, loc, lambda: chunks, parts, part, _parts_in_flight(tuning, part),
                                progress, replayable=False, our_etag=lambda: parts.etag)
    await asyncio.to_thread(_verify, remote, loc, etag, parts.etag, parts.size, "what was written")
    return parts.size, True


__all__ = ["part_size", "upload_files_obstore", "upload_stream_obstore"]

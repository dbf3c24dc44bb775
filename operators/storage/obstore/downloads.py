"""Downloads through obstore (the Rust `object_store` crate): the engine of RemoteStore's bulk downloads.

Why: botocore costs ~4 ms of client CPU per small object here and the GIL serialises it; obstore signs and reads
in Rust on one event loop, ~1.2 ms per object (bench/README.md, "transfer engine"). Everything around the bytes
stays ours, with the guarantees of the botocore path (storage.botocore.downloads):

- the same connection: endpoint, region, credentials (AwsBaseHook's session, refreshed through a provider) and the
  addressing style botocore itself resolves for the bucket (storage.remote.Remote.engine_settings);
- every GET carries If-Match with the listed ETag, so a changed object fails as "changed", never mixes versions;
- objects below the multipart threshold are one GET each, streamed to a temp file with their CRC or MD5
  (transfers.body_check); objects at or above it are split into ranges fetched in parallel and written at their
  offsets (os.pwrite), each range's CRC64NVME computed on the way: at most `concurrency` requests in flight, each
  holding at most a chunk of IO_CHUNK, so memory stays bounded;
- object_store retries requests (5xx incl. 503 SlowDown, 429, connection errors, timeouts) REQUEST_RETRIES times
  with jittered backoff; a body that breaks off or arrives short is retried here BODY_ATTEMPTS times;
- sizes (always), then the CRC64NVME our uploads recorded in the object's metadata (storage.checksums: obstore
  cannot see the store's own x-amz-checksum-* headers; a large object's from its ranges' CRCs, combined, with no
  second read), else MD5s (where the ETag is one) are verified before the temp file is renamed into place; a large
  object's MD5 (one PUT of >= multipart_threshold) is computed while its later ranges still download: each range,
  once it and every range before it are written, is read back from the page cache on a worker thread (MD5 is
  sequential, the ranges arrive out of order), so only the last range's MD5 is left when the last byte arrives
  (it was a whole second read of the file after it, ~1.7 s per GiB);
- errors become one-line StorageErrors in storage.errors (translate_error knows obstore's exceptions).

No checksum headers are sent (GETs only), so COS/OSS/OBS accept the requests as they accept botocore's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from dataclasses import dataclass, field

import obstore

from operators.storage import checksums
from operators.storage.errors import StorageError, translate_error
from operators.storage.location import ObjectInfo, StorageLocation, is_md5_etag
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
    MISMATCH_ATTEMPTS,
    TransferTuning,
    body_check,
    etag_is_not_md5,
    body_mismatch,
    make_parent_dirs,
    remove_quietly,
    temp_name,
    verify_file,
)

log = logging.getLogger("operators.storage.hook")


@dataclass
class _Large:
    """A large object being fetched in ranges: its temp file, and how many ranges are still to come."""

    info: ObjectInfo
    final: str
    temp: str
    left: int  # ranges still to come, of `ranges`
    ranges: int
    fd: int | None = None  # opened by its first range: a channel of thousands of large objects opens few at once
    stored: checksums.Stored | None = None  # the CRC64NVME its metadata carries (every range answers it)
    crcs: dict[int, tuple[int, int]] = field(default_factory=dict)  # range start -> (its CRC64NVME, its length)
    # The MD5 of an object without a stored CRC whose ETag is one, computed in order as ranges complete:
    md5: object | None = None  # hashlib's md5 (None until a range answered without a stored CRC)
    hashed: int = 0  # bytes [0, hashed) are in md5
    written: dict[int, int] = field(default_factory=dict)  # start -> end of written ranges not hashed yet
    hashing: asyncio.Task | None = None  # the task hashing the written prefix (one at a time: MD5 is sequential)
    read_fd: int | None = None
    stop_hashing: bool = False  # a transfer failed: the hashing task stops after its current step


def download_objects_obstore(
    settings: EngineSettings,
    remote: Remote,
    loc: StorageLocation,
    targets: list[tuple[ObjectInfo, str]],
    progress: TransferProgress,
    tuning: TransferTuning,
) -> None:
    """Download (object, final path) pairs of bucket `loc.bucket`; raises the first failure as a StorageError."""
    make_parent_dirs(final for _, final in targets)
    store = make_store(settings, loc.bucket)
    run_coroutine(_download_all(store, remote, loc, targets, progress, tuning))


async def _download_all(store, remote, loc, targets, progress, tuning) -> None:
    jobs: list[tuple] = []
    larges: list[_Large] = []
    big = [t for t in targets if t[0].size >= tuning.multipart_threshold]
    part = tuning.download_part_size(max(info.size for info, _ in big)) if big else 0
    try:
        for info, final in targets:
            if info.size < tuning.multipart_threshold:
                jobs.append(("object", info, final))
                continue
            ranges = [(start, min(start + part, info.size)) for start in range(0, info.size, part)]
            large = _Large(info, final, temp_name(final), left=len(ranges), ranges=len(ranges))
            larges.append(large)
            jobs.extend(("range", large, start, end) for start, end in ranges)
        # Small objects and ranges each get `concurrency` workers, as the botocore path's thread pool and
        # s3transfer do: a channel of one huge file and many small ones keeps both going, and a small object that
        # fails stops a large one in flight instead of waiting behind its ranges.
        async def get_object(job) -> None:
            await _get_object(store, remote, loc, job[1], job[2], progress)

        async def get_range(job) -> None:
            await _get_range(store, remote, loc, *job[1:], progress)

        await run_workers((get_object, [job for job in jobs if job[0] == "object"], tuning.concurrency),
                          (get_range, [job for job in jobs if job[0] == "range"], tuning.concurrency))
    finally:
        for large in larges:
            large.stop_hashing = True
            if large.hashing is not None:
                # Let its current step end (at most one MD5_STEP on a worker thread) before its file is closed.
                await asyncio.gather(large.hashing, return_exceptions=True)
            for fd in (large.fd, large.read_fd):
                if fd is not None:
                    os.close(fd)
            remove_quietly(large.temp)  # gone already when it was renamed into place


def _uri(loc: StorageLocation, info: ObjectInfo) -> str:
    return f"{loc.scheme}://{loc.bucket}/{info.key}"


def _options(info: ObjectInfo, byte_range: tuple[int, int] | None = None) -> dict:
    options: dict = {"if_match": f'"{info.etag}"'} if info.etag else {}
    if byte_range is not None:
        options["range"] = byte_range
    return options


async def _get_object(store, remote: Remote, loc: StorageLocation, info: ObjectInfo, final: str,
                      progress: TransferProgress) -> None:
    """GET (If-Match) into a temp file with its CRC or MD5 (transfers.body_check), verify, rename; body failures
    retried as in storage.botocore.downloads."""
    uri = _uri(loc, info)
    temp = temp_name(final)
    attempt = mismatches = 0
    try:
        while True:
            attempt += 1
            try:
                result = await obstore.get_async(store, info.key, options=_options(info))
            except Exception as err:  # noqa: BLE001 - object_store has retried what it retries
                raise translate_error(err, "download", uri, remote) from None
            written = 0
            stored = checksums.from_metadata(result.attributes)
            digest = body_check(info, stored)
            try:
                with open(temp, "wb") as fh:
                    if info.size <= IO_CHUNK:
                        chunks = [await result.bytes_async()]
                    else:
                        chunks = result.stream(min_chunk_size=IO_CHUNK)
                    async for chunk in _aiter(chunks):
                        view = memoryview(chunk)
                        if len(view) >= OFFLOAD_BYTES:
                            await asyncio.to_thread(_write_and_hash, fh, view, digest)
                        else:
                            _write_and_hash(fh, view, digest)
                        written += len(view)
                        progress.add_bytes(len(view))
            except OSError:
                raise  # the local disk, not the transfer: translated by the caller (disk full, permissions)
            except Exception as err:  # noqa: BLE001 - the body broke off (reset, truncated, timed out)
                progress.add_bytes(-written)
                if attempt >= BODY_ATTEMPTS:
                    raise translate_error(err, "download", uri, remote) from None
                log.debug("reading %s was interrupted (attempt %d): %s; retrying", uri, attempt, err)
                await asyncio.sleep(backoff_seconds(attempt))
                continue
            problem = body_mismatch(written, digest, info, uri, remote, loc.bucket, stored)
            if problem is None:
                break
            mismatches += 1
            progress.add_bytes(-written)
            if mismatches >= MISMATCH_ATTEMPTS or attempt >= BODY_ATTEMPTS:
                raise problem
            log.debug("%s (attempt %d); retrying", problem, attempt)
            await asyncio.sleep(backoff_seconds(attempt))
        os.replace(temp, final)
    except BaseException:
        remove_quietly(temp)
        raise
    progress.add_file()


def _write_and_hash(fh, view: memoryview, digest) -> None:
    fh.write(view)
    if digest is not None:
        digest.update(view)


async def _aiter(chunks):
    if isinstance(chunks, list):
        for chunk in chunks:
            yield chunk
    else:
        async for chunk in chunks:
            yield chunk


async def _get_range(store, remote: Remote, loc: StorageLocation, large: _Large, start: int, end: int,
                     progress: TransferProgress) -> None:
    """One range of a large object (If-Match) written at its offset; the last range verifies and renames."""
    info = large.info
    uri = _uri(loc, info)
    if large.fd is None:
        large.fd = os.open(large.temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    attempt = 0
    while True:
        attempt += 1
        try:
            result = await obstore.get_async(store, info.key, options=_options(info, (start, end)))
        except Exception as err:  # noqa: BLE001
            raise translate_error(err, "download", uri, remote) from None
        offset = start
        large.stored = large.stored or checksums.from_metadata(result.attributes)
        crc = checksums.Running() if large.stored is not None else None
        try:
            async for chunk in result.stream(min_chunk_size=IO_CHUNK):
                if offset + len(chunk) > end:
                    raise StorageError(f"{uri}: the store sent more than the range {start}-{end} asked for")
                os.pwrite(large.fd, chunk, offset)
                if crc is not None:
                    crc.update(chunk)
                offset += len(chunk)
                progress.add_bytes(len(chunk))
            if offset != end:
                raise _ShortBody(f"range {start}-{end} of {uri} ended after {offset - start} bytes")
        except (OSError, StorageError):
            raise  # the local disk, or a store that ignores ranges: retrying will not help
        except Exception as err:  # noqa: BLE001 - the body broke off or came short
            progress.add_bytes(-(offset - start))
            if attempt >= BODY_ATTEMPTS:
                raise translate_error(err, "download", uri, remote) from None
            log.debug("reading %s (bytes %d-%d) was interrupted (attempt %d); retrying", uri, start, end, attempt)
            await asyncio.sleep(backoff_seconds(attempt))
            continue
        break
    if crc is not None:
        large.crcs[start] = (crc.value, end - start)
    elif large.stored is None and is_md5_etag(info.etag):
        large.written[start] = end
        if large.hashing is None or large.hashing.done():
            large.hashing = asyncio.create_task(_hash_written(large))
    large.left -= 1
    if large.left == 0:
        os.close(large.fd)
        large.fd = None
        if not _verified_by_ranges(large, uri):
            if large.hashing is not None:
                await large.hashing
                await _hash_written(large)  # what the last range wrote, if the task ended before it
                os.close(large.read_fd)  # a channel of thousands of large objects keeps few open at once
                large.read_fd = None
            hashed_whole = large.md5 is not None and large.hashed == info.size
            # Its size, and its MD5 read back where the ranges did not give it whole (off the event loop, where
            # the other transfers run; e.g. some ranges answered with a stored CRC and some without).
            await asyncio.to_thread(verify_file, large.temp, info, uri, None if hashed_whole else remote, loc.bucket)
            if hashed_whole:
                _check_md5(large, uri, remote, loc.bucket)
        os.replace(large.temp, large.final)
        progress.add_file()


# One worker-thread call hashes at most this much: a failed transfer waits for no more than that before it cleans up.
MD5_STEP = 8 * 1024 * 1024


async def _hash_written(large: _Large) -> None:
    """Feed the object's MD5 with every range written next to what it already holds, in order, read back from the
    page cache on worker threads (hashlib releases the GIL: the event loop goes on downloading)."""
    if large.md5 is None:
        large.md5 = hashlib.md5(usedforsecurity=False)
        large.read_fd = os.open(large.temp, os.O_RDONLY)
    while large.hashed in large.written and not large.stop_hashing:
        end = large.written[large.hashed]
        step_end = min(end, large.hashed + MD5_STEP)
        await asyncio.to_thread(_hash_region, large.read_fd, large.md5, large.hashed, step_end)
        del large.written[large.hashed]
        if step_end < end:
            large.written[step_end] = end
        large.hashed = step_end


def _hash_region(fd: int, digest, start: int, end: int) -> None:
    while start < end:
        chunk = os.pread(fd, min(IO_CHUNK, end - start), start)
        if not chunk:
            raise StorageError("a downloaded file ended early while it was being verified (was it removed?)")
        digest.update(chunk)
        start += len(chunk)


def _check_md5(large: _Large, uri: str, remote: Remote, bucket: str) -> None:
    """The large object's MD5, computed as its ranges were written, against its ETag (verify_file's check)."""
    info = large.info
    digest = large.md5.hexdigest()
    if digest != info.etag and not etag_is_not_md5(remote, bucket, info.key):
        raise StorageError(
            f"downloaded {uri} has MD5 {digest} but its ETag is {info.etag}; the transfer was corrupted "
            "or the object changed; retry the task"
        )


def _verified_by_ranges(large: _Large, uri: str) -> bool:
    """Check a large object against the CRC64NVME its metadata carries, from its ranges' CRCs combined (no byte read
    again); False where it carries none (or a range answered without it): verify_file decides then."""
    if large.stored is None or len(large.crcs) != large.ranges:
        return False
    computed = checksums.join(large.stored.algorithm, [large.crcs[start] for start in sorted(large.crcs)])
    if computed != large.stored.value:
        raise StorageError(f"{checksums.mismatch_text(uri, large.stored, computed)}; the transfer was corrupted or "
                           "the object changed; retry the task")
    return True


class _ShortBody(Exception):
    """A range's body ended before its last byte (the connection closed cleanly mid-body)."""


__all__ = ["download_objects_obstore"]

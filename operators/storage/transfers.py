"""What the transfer engines of ObjectStorageHook share: their tuning, temp names, the checks of what landed, and
local copies.

The engines themselves: storage.botocore (downloads, uploads, stream: s3transfer and worker threads) and
storage.obstore (downloads, uploads: object_store on an event loop). Whatever lands is verified (size always, then
the object's full-object CRC where it carries one, else MD5 where the ETag is a plain MD5: storage.checksums) and
renamed from a temp name to its final name only then: nothing partial or unverified is ever visible under a final
name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable


from operators.storage import checksums
from operators.storage.errors import StorageError
from operators.storage.location import ObjectInfo, StorageLocation, is_md5_etag
from operators.storage.progress import TransferProgress
from operators.storage.retries import BODY_ATTEMPTS

if TYPE_CHECKING:
    from operators.storage.remote import Remote

log = logging.getLogger("operators.storage.hook")

IO_CHUNK = 1024 * 1024
MAX_DOWNLOAD_PART = 64 * 1024 * 1024

# (local source path, destination, size) of one file to upload
UploadItem = tuple[str, StorageLocation, int]


@dataclass(frozen=True)
class TransferTuning:
    """The [training] transfer settings, as the engines need them."""

    concurrency: int
    multipart_threshold: int
    multipart_chunksize: int

    def transfer_config(self, *, part_size: int | None = None):
        from s3transfer.manager import TransferConfig  # lazy: the botocore engine's only (a step's cache hit has none)

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
    return etag_hides_md5(head)


def etag_hides_md5(head: dict) -> bool:
    """Whether a HEAD response's object is encrypted so that its ETag is not its MD5 (SSE-KMS, SSE-C)."""
    return head.get("ServerSideEncryption") == "aws:kms" or bool(head.get("SSECustomerAlgorithm"))


def make_parent_dirs(finals: Iterable[str]) -> None:
    for directory in {os.path.dirname(final) for final in finals}:
        os.makedirs(directory, exist_ok=True)


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


# ---------------------------------------------------------------------------------------------------------------
# checks of a downloaded body or file (both engines)

# Both engines (botocore/downloads.py, obstore/downloads.py) fetch a body again this many times when it arrives whole
# but wrong.
MISMATCH_ATTEMPTS = 3


def body_check(info: ObjectInfo, stored: checksums.Stored | None):
    """What verifies a body while it is written (an object with `update`), or None (its size only): the object's
    full-object CRC where it carries one (C, ~0.02 ms of CPU per MiB), else its MD5 where the ETag is one (~1.7 ms)."""
    if stored is not None:
        return checksums.Running(stored.algorithm)
    if is_md5_etag(info.etag):
        return hashlib.md5(usedforsecurity=False)
    return None


def body_mismatch(written: int, check, info: ObjectInfo, uri: str, remote: Remote, bucket: str,
                  stored: checksums.Stored | None = None) -> StorageError | None:
    """What is wrong with a downloaded body (size, then what `body_check` computed: CRC or MD5), or None."""
    if written != info.size:
        return StorageError(
            f"downloaded {uri} has {written} bytes but the listing said {info.size}; the object changed or the "
            f"transfer was cut short, {MISMATCH_ATTEMPTS} times; retry the task"
        )
    if isinstance(check, checksums.Running):
        if stored is not None and check.value != stored.value:
            return StorageError(f"{checksums.mismatch_text(uri, stored, check.value)}; the transfer was corrupted "
                                f"or the object changed, {MISMATCH_ATTEMPTS} times; retry the task")
        return None
    if check is not None and check.hexdigest() != info.etag and not etag_is_not_md5(remote, bucket, info.key):
        return StorageError(
            f"downloaded {uri} has MD5 {check.hexdigest()} but its ETag is {info.etag}; the transfer was "
            f"corrupted or the object changed, {MISMATCH_ATTEMPTS} times; retry the task"
        )
    return None


def verify_file(path: str, info: ObjectInfo, uri: str, remote: Remote | None, bucket: str,
                stored: checksums.Stored | None = None) -> None:
    """Check a downloaded file against its listing: its size, then its `stored` full-object CRC where it has one,
    else its MD5 where the ETag is one (and `remote` can tell an encrypted object's ETag from an MD5). Raises a
    StorageError naming what differs."""
    size = os.path.getsize(path)
    if size != info.size:
        raise StorageError(
            f"downloaded {uri} has {size} bytes but the listing said {info.size}; the object changed or the "
            "transfer was cut short; retry the task"
        )
    if stored is not None:
        computed = checksums.of_file(path, stored.algorithm)
        if computed != stored.value:
            raise StorageError(f"{checksums.mismatch_text(uri, stored, computed)}; the transfer was corrupted or "
                               "the object changed; retry the task")
        return
    if remote is not None and is_md5_etag(info.etag):
        digest = md5_file(path)
        if digest != info.etag and not etag_is_not_md5(remote, bucket, info.key):
            raise StorageError(
                f"downloaded {uri} has MD5 {digest} but its ETag is {info.etag}; the transfer was corrupted "
                "or the object changed; retry the task"
            )


__all__ = [
    "IO_CHUNK",
    "MISMATCH_ATTEMPTS",
    "TransferTuning",
    "UploadItem",
    "body_check",
    "body_mismatch",
    "copy_local_files",
    "etag_hides_md5",
    "etag_is_not_md5",
    "make_parent_dirs",
    "md5_file",
    "remove_quietly",
    "temp_name",
    "verify_file",
]

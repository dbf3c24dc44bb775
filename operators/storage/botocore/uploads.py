"""Uploads through botocore for ObjectStorageHook: local files to objects through s3transfer (multipart above the
threshold), each storing a full-object CRC64NVME where the store takes one (`store_takes_checksums`), then a check
of what landed against what was sent (the multipart safety net both engines use: storage.leftover_uploads)."""

from __future__ import annotations

import logging
from typing import Callable

from s3transfer.manager import TransferManager

from operators.storage import checksums
from operators.storage.botocore.subscribers import subscriber_classes
from operators.storage.errors import StorageError, translate_error
from operators.storage.leftover_uploads import abort_leftover_uploads
from operators.storage.location import (
    ObjectInfo,
    StorageLocation,
    is_md5_etag,
    normalize_etag,
)
from operators.storage.progress import TransferProgress
from operators.storage.remote import Remote
from operators.storage.transfers import (
    TransferTuning,
    UploadItem,
    etag_is_not_md5,
    md5_file,
)

log = logging.getLogger("operators.storage.hook")


def store_takes_checksums(remote: Remote, bucket: str, key: str) -> bool:
    """Whether uploads to `bucket` store checksums.UPLOAD_ARGS' full-object CRC64NVME (so later downloads verify
    without MD5). AWS does. Any other store is asked once per bucket of a connection: a multipart upload of `key`
    started with them, one byte sent as part 1 with its checksum header, then aborted (nothing becomes visible). A
    store that refuses either, or answers no checksum for the part, gets uploads without one (one log line), verified
    by size and MD5 as before: a refusal must not break uploads, and some S3-compatible stores refuse what they do not
    know. Asked with the upload's own key, which this task may write."""
    known = remote.__dict__.setdefault("_checksum_support", {})
    if bucket not in known:
        known[bucket] = True if remote.is_aws else _probe_checksums(remote, bucket, key)
    return known[bucket]


def _probe_checksums(remote: Remote, bucket: str, key: str) -> bool:
    client, algorithm = remote.client, checksums.UPLOAD_ALGORITHM
    upload_id = None
    try:
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key, **checksums.UPLOAD_ARGS)["UploadId"]
        part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"\0",
                                  ChecksumAlgorithm=algorithm.label)
        answered = part.get(algorithm.member)
        reason = "" if answered == algorithm.encode(algorithm.compute(b"\0")) else f"it answered {answered!r}"
    except Exception as err:  # noqa: BLE001 - whatever the store says, uploads go on without checksums
        log.debug("checksum probe of s3://%s/%s failed", bucket, key, exc_info=True)
        reason = f"it refused them ({getattr(err, 'response', {}).get('Error', {}).get('Code') or type(err).__name__})"
    finally:
        if upload_id is not None:
            try:
                client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            except Exception:  # noqa: BLE001 - the lifecycle rule removes what is left (abort_leftover_uploads)
                log.debug("aborting the checksum probe of s3://%s/%s failed", bucket, key, exc_info=True)
    if reason:
        log.warning("Uploads to s3://%s via connection '%s' store no %s checksum (%s): they are verified by size and "
                    "MD5 instead", bucket, remote.conn_id, algorithm.label, reason)
    return not reason


def upload_files(
    remote: Remote,
    base: StorageLocation,
    items: list[UploadItem],
    progress: TransferProgress,
    tuning: TransferTuning,
    list_landed: Callable[[], list[ObjectInfo]] | None,
) -> None:
    """Upload (local path, location, size) triples through s3transfer, then verify what landed.

    `list_landed` lists the destination prefix (one LIST instead of a HEAD per object when many were sent).
    """
    _, Progress, OnDone = subscriber_classes()
    transfer_config = tuning.transfer_config()

    def on_done(future) -> None:
        try:
            future.result()
        except BaseException:  # noqa: BLE001 - the error is raised from result() below
            return
        progress.add_file()

    futures = []
    multipart = [loc.key for _path, loc, size in items if size >= transfer_config.multipart_threshold]
    with_checksums = bool(items) and store_takes_checksums(remote, base.bucket, items[0][1].key)
    try:
        with TransferManager(remote.client, transfer_config) as manager:
            for path, loc, _size in items:
                extra = dict(checksums.UPLOAD_ARGS) if with_checksums else {}  # s3transfer changes its copy
                futures.append((path, loc, manager.upload(path, loc.bucket, loc.key, extra_args=extra,
                                                          subscribers=[Progress(progress), OnDone(on_done)])))
            for path, loc, fut in futures:
                try:
                    fut.result()
                except Exception as err:  # noqa: BLE001 - raising here cancels (and aborts) the rest
                    log.debug("upload %s failed", loc.uri, exc_info=True)
                    raise translate_error(err, "upload", loc.uri, remote) from None
    finally:
        if multipart:  # below the threshold an object is one PutObject: nothing can be left open
            abort_leftover_uploads(remote, base.bucket, multipart)
    # Verify what landed: sizes always; then, with checksums, the CRC64NVME a HEAD answers against the local file's
    # (a listing answers none: the store checked each request's body against its checksum header on receipt);
    # without, MD5 for single-part uploads (their ETag is the MD5).
    stored: dict[str, checksums.Stored | None] = {}
    try:
        if list_landed is not None and len(items) > 1:
            landed = {o.key: o for o in list_landed()}
        else:
            landed = {}
            for _path, loc, _size in items:
                head = remote.client.head_object(Bucket=loc.bucket, Key=loc.key)
                landed[loc.key] = ObjectInfo(loc.key, "", int(head["ContentLength"]), normalize_etag(head.get("ETag")))
                stored[loc.key] = checksums.from_response(head)
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
        if with_checksums:
            known = stored.get(loc.key)
            if known is not None and (computed := checksums.of_file(path, known.algorithm)) != known.value:
                raise StorageError(f"uploaded {loc.uri} has {known.describe()} but the local file has "
                                   f"{known.describe(computed)}; retry the task")
        elif size < transfer_config.multipart_threshold and is_md5_etag(info.etag):
            digest = md5_file(path)
            if digest != info.etag and not etag_is_not_md5(remote, loc.bucket, loc.key):
                raise StorageError(
                    f"uploaded {loc.uri} has ETag {info.etag} but the local file's MD5 is {digest}; retry the task"
                )


__all__ = ["store_takes_checksums", "upload_files"]

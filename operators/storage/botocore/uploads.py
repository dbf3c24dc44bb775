"""Uploads through botocore for ObjectStorageHook: local files to objects through s3transfer (multipart above the
threshold), then a check of what landed against what was sent; and the multipart safety net both engines use
(`abort_leftover_uploads`)."""

from __future__ import annotations

import logging
import os
from typing import Callable

from operators.storage.botocore.client import Remote
from operators.storage.botocore.subscribers import subscriber_classes
from operators.storage.errors import StorageError, translate_error
from operators.storage.location import (
    ObjectInfo,
    StorageLocation,
    is_md5_etag,
    normalize_etag,
)
from operators.storage.progress import TransferProgress
from operators.storage.transfers import (
    TransferTuning,
    UploadItem,
    etag_is_not_md5,
    md5_file,
)

log = logging.getLogger("operators.storage.hook")


def abort_leftover_uploads(remote: Remote, bucket: str, keys: list[str]) -> int:
    """Abort the multipart uploads still open for exactly these keys; returns how many. Best effort: never raises.

    s3transfer aborts the upload it knows of when a transfer fails, but not one whose CreateMultipartUpload
    response was lost (the store created it; the retry created another), nor one of an earlier attempt killed
    mid-upload. The keys are this job's (one run per job_name; see operators/state/lease.py), so an upload still open
    for one of them once ours has finished is a leftover: parts the bucket bills for and nobody will complete.
    What this misses (a worker killed before it gets here) is for the bucket's lifecycle rule
    (docs/operations.md, "Incomplete multipart uploads").
    """
    wanted = set(keys)
    if not wanted:
        return 0
    prefix = os.path.commonprefix(sorted(wanted))
    aborted = 0
    try:
        pages = remote.client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for upload in page.get("Uploads", []) or []:
                if upload.get("Key") not in wanted:
                    continue
                try:
                    remote.client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                    aborted += 1
                except Exception as err:  # noqa: BLE001 - NoSuchUpload: gone already, which is what we want
                    if "NoSuchUpload" not in str(err):
                        raise
    except Exception as err:  # noqa: BLE001 - cleanup must not replace the outcome of the upload
        log.warning("Could not abort leftover multipart uploads under s3://%s/%s (%s); a lifecycle rule on the "
                    "bucket removes them", bucket, prefix, type(err).__name__)
        log.debug("abort leftovers failed", exc_info=True)
    if aborted:
        log.info("Aborted %d leftover multipart upload(s) under s3://%s/%s", aborted, bucket, prefix)
    return aborted


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
    from s3transfer.manager import TransferManager

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
    try:
        with TransferManager(remote.client, transfer_config) as manager:
            for path, loc, _size in items:
                futures.append((path, loc, manager.upload(path, loc.bucket, loc.key,
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


__all__ = ["abort_leftover_uploads", "upload_files"]

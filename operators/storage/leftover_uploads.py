"""The multipart safety net both engines use: abort the uploads a failed or lost request left open for a job's keys
(through the connection's botocore client, storage.remote)."""

from __future__ import annotations

import logging
import os

from operators.storage.remote import Remote

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

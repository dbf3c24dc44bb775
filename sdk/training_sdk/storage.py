"""The SDK's S3 client: the platform's retry policy for a user's own uploads (code_location) and downloads (local mode).

A notebook uploading code or downloading a channel through a flaky store should fail no more often than the platform
would. Same policy as the platform's storage hooks: every request gets REQUEST_ATTEMPTS in botocore's "standard" mode
(throttling, 5xx, connection errors and resets, a small response cut short; jittered exponential backoff), botocore's
retry quota made too large to run out (it stops all retries after a few hundred faults), and a downloaded body that
breaks off (which botocore does not retry: it is read after the request returned) fetched again BODY_ATTEMPTS times by
s3transfer.
"""

# A copy of operators/storage/retries.py's figures, operators/storage/remote_retries.py's quota fix (and
# operators/storage/remote.py's checksum setting for stores that are not AWS), not an import: the SDK installs
# on its own (airflow-training-jobs-sdk[s3] is boto3 without the platform), so it must not import `operators`. Keep the two in step.

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("training_sdk.storage")

# botocore's `max_attempts` counts retries: 9 retries, 10 attempts in all.
REQUEST_RETRIES = 9
REQUEST_ATTEMPTS = REQUEST_RETRIES + 1
BODY_ATTEMPTS = 10
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
_QUOTA_CAPACITY = 10**9
_AWS_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")
# The object-storage URI schemes: the SDK's one copy of operators/storage/location.py's REMOTE_SCHEMES (the SDK must
# not import the platform; tests/sdk/test_storage_schemes.py keeps the two equal).
REMOTE_SCHEMES = ("s3", "cos", "oss", "obs")


def s3_client():
    """A boto3 S3 client (credentials, region and endpoint from boto3's usual AWS_* variables and files) that
    retries like the platform's."""
    # lazy: boto3 (~0.3 s), only where the SDK moves bytes itself
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": REQUEST_RETRIES}, connect_timeout=CONNECT_TIMEOUT_S,
                    read_timeout=READ_TIMEOUT_S, tcp_keepalive=True)
    client = boto3.client("s3", config=config)
    if not _is_aws(client.meta.endpoint_url):
        # boto3 >= 1.36 sends CRC checksums in aws-chunked bodies by default, which S3-compatible stores (COS, OSS,
        # OBS, older MinIO) may refuse: only where the API requires one, as the platform does. The endpoint is known
        # only once boto3 has read its variables and files, hence the second client.
        config = config.merge(Config(request_checksum_calculation="when_required",
                                     response_checksum_validation="when_required"))
        client = boto3.client("s3", config=config)
    _widen_retry_quota(client)
    return client


def _is_aws(endpoint_url: str | None) -> bool:
    host = (urlsplit(endpoint_url or "").hostname or "").lower()
    return not host or host.endswith(_AWS_HOST_SUFFIXES)


def transfer_config():
    """s3transfer's settings for download_file/upload_file: a body that breaks off is fetched again."""
    # lazy: boto3 (~0.3 s), only where the SDK moves bytes itself
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(num_download_attempts=BODY_ATTEMPTS)


def _widen_retry_quota(client: Any) -> None:
    try:
        # botocore registers its standard-mode handler under this id; the quota checker is shared with the
        # after-call handler that refills it.
        handler = client.meta.events._emitter._unique_id_handlers["retry-config-s3"]["handler"]
        checker = handler.__self__._retry_quota
        # lazy: boto3 (~0.3 s), only where the SDK moves bytes itself
        from botocore.retries.quota import RetryQuota

        checker._quota = RetryQuota(initial_capacity=_QUOTA_CAPACITY)
    except Exception:  # noqa: BLE001 - another botocore version: its default quota stays
        log.debug("could not widen botocore's retry quota", exc_info=True)


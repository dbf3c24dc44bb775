"""What botocore's retries need for transfers (the figures are storage.retries'): what reading a body raises when
it breaks off (`body_errors`), and the client fixes of `install`.

`install(client)` fixes two things botocore gets wrong for transfers:

- Its retry quota (500 tokens; a retry after a reset costs 14, a throttled one 5, a clean response gives 1 back)
  is meant to stop retry storms of request/response APIs. A transfer of many objects through a network that
  resets 10% of connections drains it after a few hundred requests, and from then on nothing is retried at all:
  every fault fails the task. Attempts per request stay bounded (REQUEST_ATTEMPTS, with backoff), so the quota
  is made large enough never to run out in a task.
- CompleteMultipartUpload retried after a response that was lost (the upload did complete) gets NoSuchUpload
  from stores that forget an upload once completed (MinIO, Ceph). The object is there, exactly the parts we sent:
  when its ETag is the one those parts make, the call succeeded and is answered as such.
"""

from __future__ import annotations

import hashlib
import logging
import socket
from typing import Any

import botocore.exceptions as bx
from botocore.retries.quota import RetryQuota

log = logging.getLogger("operators.storage.hook")

_QUOTA_CAPACITY = 10**9


def multipart_etag(parts: list[dict[str, Any]]) -> str | None:
    """The ETag S3 gives an object completed from `parts` (MD5 of the parts' MD5s, '-' count); None if unknown."""
    try:
        ordered = sorted(parts, key=lambda p: int(p["PartNumber"]))
        digests = b"".join(bytes.fromhex(str(p["ETag"]).strip('"')) for p in ordered)
    except (KeyError, TypeError, ValueError):
        return None
    return f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(ordered)}"


def _widen_retry_quota(client) -> None:
    try:
        # botocore registers its standard-mode handler under this unique id; the quota checker is shared with
        # the after-call handler that refills it.
        handler = client.meta.events._emitter._unique_id_handlers["retry-config-s3"]["handler"]
        checker = handler.__self__._retry_quota
        checker._quota = RetryQuota(initial_capacity=_QUOTA_CAPACITY)
    except Exception:  # noqa: BLE001 - another retry mode (the connection's config_kwargs) or botocore version
        log.debug("could not widen botocore's retry quota; transfers keep its default", exc_info=True)


def _complete_retry_handlers(client):
    def remember_parts(params, context, **kwargs) -> None:
        parts = ((params or {}).get("MultipartUpload") or {}).get("Parts") or []
        context["training_expected_etag"] = multipart_etag(parts)
        context["training_object"] = (params.get("Bucket"), params.get("Key"))

    def answer_lost_completion(http_response, parsed, context, **kwargs) -> None:
        expected = context.get("training_expected_etag")
        if http_response.status_code != 404 or not expected:
            return
        if (parsed.get("Error") or {}).get("Code") not in ("NoSuchUpload", "404"):
            return  # "404": the error's body was cut short too
        bucket, key = context["training_object"]
        try:
            head = client.head_object(Bucket=bucket, Key=key)
        except Exception:  # noqa: BLE001 - the original NoSuchUpload stands
            return
        if str(head.get("ETag", "")).strip('"') != expected:
            return
        log.debug("completing s3://%s/%s was retried after a lost response; the object is complete", bucket, key)
        metadata = dict(parsed.get("ResponseMetadata") or {}, HTTPStatusCode=200)
        parsed.clear()
        parsed.update({"Bucket": bucket, "Key": key, "ETag": head["ETag"], "ResponseMetadata": metadata})
        http_response.status_code = 200

    return remember_parts, answer_lost_completion


def install(client) -> None:
    """Make `client` (an S3 client in standard retry mode) fit for transfers; see the module's docstring."""
    _widen_retry_quota(client)
    remember_parts, answer_lost_completion = _complete_retry_handlers(client)
    client.meta.events.register("before-parameter-build.s3.CompleteMultipartUpload", remember_parts,
                                unique_id="training-complete-parts")
    client.meta.events.register("after-call.s3.CompleteMultipartUpload", answer_lost_completion,
                                unique_id="training-complete-retry")


def body_errors() -> tuple[type[BaseException], ...]:
    """What reading a response body raises when the connection breaks off or the body is cut short."""
    return (
        socket.timeout,
        ConnectionError,
        bx.ReadTimeoutError,
        bx.IncompleteReadError,
        bx.ResponseStreamingError,
        bx.ConnectionClosedError,
    )


__all__ = ["body_errors", "install", "multipart_etag"]

"""Storage errors: one line a person can act on, translated from botocore / s3transfer / OS exceptions.

`translate_error` maps whatever a transfer raised to a `StorageError` naming the action, the URI, the
connection id and what to do; it never includes credentials and never a stack of botocore internals (callers
log the original exception at DEBUG).
"""

from __future__ import annotations

import errno
import re
from typing import Protocol
from urllib.parse import urlsplit


class StorageError(Exception):
    """A storage operation failed; str() is one line saying what, where (URI, connection) and what to do.

    `permanent`: retrying cannot help until someone changes something (credentials, permissions, a bucket or
    object that does not exist, the connection's settings), so a stage fails at once instead of retrying. The
    rest (interrupted connections, throttling, server errors, a transfer cut short) may pass on a retry.
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(" ".join(str(message).split()))
        self.permanent = permanent


class DiskFullError(StorageError):
    """A local file system had no room (ENOSPC/EDQUOT); callers that know the figures say them (disk_space.py).

    Permanent for the task: its automatic retries seconds later would find the disk as full (someone frees space,
    then clears the task or starts the next run)."""

    def __init__(self, message: str, *, path: str = "", needed: int | None = None, free: int | None = None) -> None:
        super().__init__(message, permanent=True)
        self.path, self.needed, self.free = path, needed, free


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class RemoteLike(Protocol):
    """What an error message needs to know about the client a request went through."""

    conn_id: str
    endpoint: str | None


def display_endpoint(endpoint: str | None) -> str:
    if not endpoint:
        return "default AWS endpoint"
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return f"{parts.scheme}://{host}" if parts.scheme else endpoint  # drop any user:password@


AUTH_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
}
DENIED_CODES = {"AccessDenied", "AllAccessDisabled", "Forbidden", "403"}
NO_OBJECT_CODES = {"NoSuchKey", "404", "NotFound"}
REGION_CODES = {"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException", "301"}
# What stores answer when they shed load: S3 and COS/OSS/OBS "SlowDown" (503), MinIO "SlowDownRead/Write" (503)
# and "TooManyRequests" (429), AWS APIs "Throttling"/"RequestLimitExceeded". botocore's standard mode has already
# retried these with backoff when we see them.
THROTTLE_CODES = {
    "SlowDown",
    "SlowDownRead",
    "SlowDownWrite",
    "TooManyRequests",
    "TooManyRequestsException",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "BandwidthLimitExceeded",
    "ServiceUnavailable",
    "503",
    "429",
}


def translate_error(err: BaseException, action: str, uri: str, remote: RemoteLike | None) -> StorageError:
    """Map botocore/s3transfer/OS errors to one actionable line; never includes credentials."""
    # lazy: botocore, s3transfer: not at DAG parse (the stages import this module)
    import botocore.exceptions as bx
    from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError

    if isinstance(err, StorageError):
        return err
    if is_obstore_error(err):
        err = _as_botocore_error(err)
    if isinstance(err, RetriesExceededError) and err.last_exception is not None:
        err = err.last_exception
    if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:  # never "check the path": the disk is full
        where = str(err.filename2 or err.filename or uri)  # shutil names the source first, the destination second
        return DiskFullError(f"disk full: cannot {action} {uri}: no space left on the file system of {where}; free "
                             "space there and retry the task", path=where)
    if remote is None:  # local file system
        if isinstance(err, OSError):
            what = err.strerror or type(err).__name__
            name = err.filename or uri
            return StorageError(f"cannot {action} {uri}: {what} ({name}); check the path and its permissions")
        return StorageError(f"cannot {action} {uri}: {type(err).__name__}: {err}")

    via = f"via connection '{remote.conn_id}'"
    endpoint = display_endpoint(remote.endpoint)
    if isinstance(err, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ProxyConnectionError)):
        text = f"{err} {getattr(err, 'kwargs', {}).get('error', '')} {err.__context__ or ''}".lower()
        reason = "connection refused" if "refused" in text else "timed out" if "timeout" in text or "timed out" in text else "connection failed"
        if isinstance(err, bx.ConnectTimeoutError):
            reason = "connect timed out"
        return StorageError(
            f"cannot reach {uri} {via} (endpoint {endpoint}): {reason}; "
            "check the endpoint_url in the connection's extra and that the service is reachable"
        )
    if isinstance(err, bx.SSLError):
        return StorageError(
            f"cannot reach {uri} {via} (endpoint {endpoint}): TLS error; "
            "check the endpoint_url scheme (http/https) and the connection's 'verify' extra",
            permanent=True,
        )
    if isinstance(err, (bx.ReadTimeoutError, bx.ConnectionClosedError, bx.ResponseStreamingError)):
        return StorageError(
            f"cannot {action} {uri} {via} (endpoint {endpoint}): the connection was interrupted "
            f"({type(err).__name__}) after retries; retry the task, or check the network to the endpoint"
        )
    if isinstance(err, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return StorageError(
            f"no credentials to {action} {uri} {via}; set the login (access key id) and password (secret key) "
            f"of connection '{remote.conn_id}'",
            permanent=True,
        )
    if isinstance(err, S3DownloadFailedError) and "ETag" in str(err):
        return StorageError(f"{uri} changed while it was being downloaded {via}; retry the task")
    if isinstance(err, bx.ClientError):
        error = err.response.get("Error", {}) or {}
        code = str(error.get("Code") or "")
        status = (err.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        bucket = error.get("BucketName") or ""
        if code in AUTH_CODES:
            return StorageError(
                f"access denied to {uri} {via} (endpoint {endpoint}): {code}; "
                f"check the credentials (login/password) of connection '{remote.conn_id}'",
                permanent=True,
            )
        if code in DENIED_CODES or status == 403:
            return StorageError(
                f"access denied to {uri} {via} ({code or 'HTTP 403'}); check that the credentials of connection "
                f"'{remote.conn_id}' may {action} this bucket/prefix",
                permanent=True,
            )
        if code == "NoSuchBucket":
            return StorageError(
                f"no such bucket {bucket or uri.split('/')[2]!r} for {uri} {via} (endpoint {endpoint}); "
                "check the bucket name and the connection's endpoint_url / region",
                permanent=True,
            )
        if code in NO_OBJECT_CODES or status == 404:
            return StorageError(f"no such object {uri} {via}; check the URI", permanent=True)
        if code in ("PreconditionFailed", "412") or status == 412:
            return StorageError(f"{uri} changed while it was being downloaded {via}; retry the task")
        if code in THROTTLE_CODES or status in (429, 503):
            return StorageError(
                f"cannot {action} {uri} {via} (endpoint {endpoint}): the store is throttling requests "
                f"({code or 'HTTP'} {status}) and still was after {_attempts(err)}; retry later, or lower "
                "transfer_concurrency in the [training] section so fewer requests run at once"
            )
        if code in REGION_CODES or status == 301:
            return StorageError(
                f"cannot {action} {uri} {via}: wrong region or endpoint ({code}); "
                "check region_name / endpoint_url in the connection's extra",
                permanent=True,
            )
        message = str(error.get("Message") or "").split("\n")[0][:200]
        return StorageError(
            f"cannot {action} {uri} {via} (endpoint {endpoint}): {code or 'error'} (HTTP {status})"
            f"{': ' + message if message else ''}; check the URI and the connection"
        )
    if isinstance(err, bx.BotoCoreError):
        return StorageError(f"cannot {action} {uri} {via} (endpoint {endpoint}): {type(err).__name__}: {err}")
    if isinstance(err, OSError):
        return StorageError(
            f"cannot {action} {uri} {via}: local file error: {err.strerror or err} ({err.filename or ''}); "
            "check the destination path, free space and permissions"
        )
    return StorageError(f"cannot {action} {uri} {via}: {type(err).__name__}: {err}")


def is_obstore_error(err: BaseException) -> bool:
    """An error of obstore (storage.obstore): its own classes, or a builtin (FileNotFoundError for a
    404) whose text is object_store's "Error performing ..." report."""
    module = type(err).__module__ or ""
    return module.startswith("obstore") or "Error performing " in str(err) or "Debug source:" in str(err)


_OBSTORE_STATUS = re.compile(r"status code: (\d{3})")
_OBSTORE_CODE = re.compile(r"<Code>([^<]+)</Code>")
_OBSTORE_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")
_OBSTORE_RETRIES = re.compile(r"retries: (\d+)")


def _as_botocore_error(err: BaseException) -> BaseException:
    """obstore's error as the botocore error of the same failure, so that one mapping (translate_error) names
    both engines' failures alike: throttling as throttling, 403 as access denied, 412 as a changed object.

    object_store reports a failed request as text ("Server returned non-2xx status code: 503 Service
    Unavailable: <Error><Code>SlowDown</Code>...", "retries: 9"), a broken connection as reqwest's error."""
    import botocore.exceptions as bx  # lazy: botocore, s3transfer: not at DAG parse (the stages import this module)

    text = str(err)
    status = _OBSTORE_STATUS.search(text)
    code = _OBSTORE_CODE.search(text)
    kind = type(err).__name__
    if status or code or kind in ("PermissionDeniedError", "UnauthenticatedError", "PreconditionError",
                                  "FileNotFoundError"):
        number = int(status.group(1)) if status else {"PermissionDeniedError": 403, "UnauthenticatedError": 403,
                                                      "PreconditionError": 412, "FileNotFoundError": 404}.get(kind)
        message = _OBSTORE_MESSAGE.search(text)
        retries = _OBSTORE_RETRIES.search(text)
        response = {
            "Error": {"Code": code.group(1) if code else str(number or ""),
                      "Message": message.group(1) if message else ""},
            "ResponseMetadata": {"HTTPStatusCode": number, "RetryAttempts": int(retries.group(1)) if retries else 0},
        }
        return bx.ClientError(response, "GetObject")
    lowered = text.lower()
    if "connection refused" in lowered or "dns error" in lowered or "failed to lookup address" in lowered:
        return bx.EndpointConnectionError(endpoint_url="", error="connection refused" if "refused" in lowered else "")
    if "certificate" in lowered or "tls" in lowered:
        return bx.SSLError(endpoint_url="", error=kind)
    # A request or body that broke off (reset, truncated, timed out) after object_store's retries and ours.
    return bx.ConnectionClosedError(endpoint_url="")


def _attempts(err) -> str:
    """'3 attempts' from the response's retry count (botocore records the retries it made)."""
    retries = ((err.response.get("ResponseMetadata") or {}).get("RetryAttempts")) or 0
    return f"{retries + 1} attempt{'s' if retries else ''}"


def is_not_found(err: BaseException) -> bool:
    import botocore.exceptions as bx  # lazy: botocore, s3transfer: not at DAG parse (the stages import this module)

    if isinstance(err, bx.ClientError):
        code = str((err.response.get("Error") or {}).get("Code") or "")
        status = (err.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return code in NO_OBJECT_CODES or status == 404
    return False



__all__ = ["DiskFullError", "StorageError", "display_endpoint", "is_not_found", "translate_error"]

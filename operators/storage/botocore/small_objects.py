"""Small objects of a bucket for ObjectStorageHook: whole objects read into memory and written from it (pointers,
markers, metrics), and deletes. Reads are checked like downloads (size, MD5 where the ETag is one); writes carry a
Content-MD5, so the store refuses a body corrupted on the way."""

from __future__ import annotations

import base64
import hashlib
import time

from operators.storage.errors import StorageError
from operators.storage.location import (
    StorageLocation,
    is_md5_etag,
    normalize_etag,
)
from operators.storage.remote import Remote
from operators.storage.remote_retries import body_errors
from operators.storage.retries import BODY_ATTEMPTS, backoff_seconds
from operators.storage.transfers import etag_is_not_md5


def read_object(remote: Remote, loc: StorageLocation) -> bytes:
    for attempt in range(1, BODY_ATTEMPTS + 1):
        response = remote.client.get_object(Bucket=loc.bucket, Key=loc.key)
        try:
            data = response["Body"].read()  # botocore retried the request, not a body that breaks off
            break
        except body_errors():
            if attempt == BODY_ATTEMPTS:
                raise
            time.sleep(backoff_seconds(attempt))
    etag = normalize_etag(response.get("ETag"))
    if len(data) != int(response.get("ContentLength", len(data))):
        raise StorageError(f"read {loc.uri}: got {len(data)} bytes, expected {response['ContentLength']}; retry")
    if is_md5_etag(etag) and hashlib.md5(data, usedforsecurity=False).hexdigest() != etag:
        if not etag_is_not_md5(remote, loc.bucket, loc.key):
            raise StorageError(f"read {loc.uri}: content does not match its ETag; retry")
    return data


def put_object(remote: Remote, loc: StorageLocation, data: bytes) -> None:
    md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
    # Content-MD5 makes the server reject a body corrupted on the way.
    remote.client.put_object(Bucket=loc.bucket, Key=loc.key, Body=data, ContentMD5=md5)


def delete_keys(remote: Remote, loc: StorageLocation, keys: list[str]) -> int:
    """Delete `keys` of `loc`'s bucket, 1,000 per request; returns how many."""
    for start in range(0, len(keys), 1000):
        batch = keys[start : start + 1000]
        response = remote.client.delete_objects(
            Bucket=loc.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
        )
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise StorageError(
                f"cannot delete {loc.scheme}://{loc.bucket}/{first.get('Key')} via connection "
                f"'{remote.conn_id}': {first.get('Code')}; check the permissions of the connection's credentials",
                permanent=True,
            )
    return len(keys)


__all__ = ["delete_keys", "put_object", "read_object"]

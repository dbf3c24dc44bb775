"""Listing through botocore (where storage.obstore.store.store_for keeps a bucket on botocore): the items under a
prefix, key ranges in parallel on threads, as ListObjectsV2 returns them ({"Key", "Size", "ETag", "LastModified"});
storage.listing checks and records them."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from operators.storage.remote import Remote


def exact_item(remote: Remote, bucket: str, key: str) -> dict | None:
    """The listed item of the object whose key is exactly `key`, or None."""
    # The exact key sorts first among keys sharing its prefix, so one key is enough to find it.
    response = remote.client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    for item in response.get("Contents", []) or []:
        if item["Key"] == key:
            return item
    return None


def any_under(remote: Remote, bucket: str, prefix: str) -> bool:
    """Whether some key (a directory marker included) of `bucket` starts with `prefix`."""
    response = remote.client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    return bool(response.get("KeyCount") or response.get("Contents"))


def list_items(remote: Remote, bucket: str, prefix: str, bounds: Sequence[str], concurrency: int) -> list[dict]:
    """The listed items under `prefix`, key ranges split after `bounds` listed on up to `concurrency` threads."""
    ranges = list(zip([None, *bounds], [*bounds, None]))
    if len(ranges) == 1:
        return list_range(remote, bucket, prefix, None, None)
    # A LIST page is a round trip plus ~1 ms of XML parsing per 10 keys on our side: ranges in parallel
    # overlap both (the keys of page n+1 of one sequential listing are unknown until page n is parsed).
    with ThreadPoolExecutor(max_workers=min(len(ranges), concurrency), thread_name_prefix="list") as pool:
        parts = list(pool.map(lambda r: list_range(remote, bucket, prefix, *r), ranges))
    return [item for part in parts for item in part]


def list_range(remote: Remote, bucket: str, prefix: str, start_after: str | None, last: str | None) -> list[dict]:
    """The listed items with start_after < key <= last (None: open end), in key order."""
    kwargs = {"Bucket": bucket, "Prefix": prefix}
    if start_after is not None:
        kwargs["StartAfter"] = start_after
    items: list[dict] = []
    for page in remote.client.get_paginator("list_objects_v2").paginate(**kwargs):
        contents = page.get("Contents", []) or []
        if last is not None and contents and contents[-1]["Key"] >= last:
            items.extend(item for item in contents if item["Key"] <= last)
            break  # the range is complete: do not ask for the next page
        items.extend(contents)
    return items


__all__ = ["any_under", "exact_item", "list_items", "list_range"]

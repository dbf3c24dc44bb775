"""Listing through obstore (the Rust `object_store` crate): the objects under a prefix, key ranges in parallel on one
event loop, as the botocore listing's items ({"Key", "Size", "ETag", "LastModified"}) so that storage.listing checks
and records them alike.

Why: the botocore listing needs a botocore client, and building one costs ~0.3 s of CPU in a fresh task process
(botocore parses its S3 model and endpoint rules), most of a warm cache hit; obstore signs and parses in Rust.

object_store hands keys back as its `Path`s, which drop a trailing '/': a directory marker "d/" comes back as "d".
Markers are nearly always empty objects, so an empty object (or a name listed twice: "d" and "d/") is looked up
with a HEAD of its exact key: present, it is a file; absent, a marker, skipped as the botocore listing skips it.
(A marker with content is taken for a file and fails its download as not found, instead of being skipped.)
A key object_store cannot hold as a Path at all ('..', '.', '//' segments) fails the listing with InvalidPathError;
storage.listing then lists again through botocore, whose listing refuses that key by name. Only prefixes ending in
'/' come here: object_store matches prefixes by whole path segments, botocore by
characters, and at the bucket root a key's leading '/' would vanish; those stay on botocore (storage.listing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import obstore

from operators.storage.obstore.store import run_coroutine

log = logging.getLogger("operators.storage.hook")

LIST_CHUNK = 1000  # one LIST page: object_store asks for 1,000 keys a request
RANGE_ATTEMPTS = 3  # a LIST or HEAD whose response broke off after object_store's own retries is asked again
_PERMANENT = ("PermissionDeniedError", "UnauthenticatedError", "FileNotFoundError", "NotFoundError", "InvalidPathError")


def is_key_not_a_path(err: BaseException) -> bool:
    """object_store refused a listed key it cannot hold as a Path ('..', '.', '//'): the botocore listing names it
    (storage.location.check_key) in one clear line."""
    return type(err).__name__ == "InvalidPathError"


def _is_permanent(err: BaseException) -> bool:
    # A status the store answered was retried by object_store already (5xx, 429) or will not change (4xx): only a
    # response that broke off (reset, truncated XML) is worth listing again.
    return type(err).__name__ in _PERMANENT or "status code: " in str(err)


async def _again(request, what: str):
    """`request()` (a coroutine function), asked again when its response broke off after object_store's retries:
    listings and HEADs are idempotent."""
    for attempt in range(1, RANGE_ATTEMPTS + 1):
        try:
            return await request()
        except Exception as err:
            if attempt == RANGE_ATTEMPTS or _is_permanent(err):
                raise
            log.debug("%s broke off (attempt %d of %d), asking again", what, attempt, RANGE_ATTEMPTS)
            await asyncio.sleep(0.2 * attempt)


async def _list_range(store, prefix: str, start_after: str | None, last: str | None) -> list[dict]:
    """Objects with start_after < path <= last (None: open end) under `prefix`, in key order."""
    async def once() -> list[dict]:
        items: list[dict] = []
        async for chunk in obstore.list(store, prefix=prefix, offset=start_after, chunk_size=LIST_CHUNK):
            if last is not None and chunk and chunk[-1]["path"] >= last:
                items.extend(meta for meta in chunk if meta["path"] <= last)
                break  # the range is complete: do not ask for the next page
            items.extend(chunk)
        return items

    return await _again(once, f"listing {prefix} after {start_after}")


async def head(store, key: str) -> dict | None:
    """The object's metadata, or None when no object has exactly this key."""
    async def once() -> dict | None:
        try:
            return await obstore.head_async(store, key)
        except FileNotFoundError:
            return None

    return await _again(once, f"HEAD {key}")


def _item(meta: dict, key: str | None = None) -> dict:
    return {"Key": key or meta["path"], "Size": meta["size"], "ETag": meta.get("e_tag"),
            "LastModified": meta.get("last_modified")}


async def _list(store, prefix: str, bounds: Sequence[str], concurrency: int) -> list[dict]:
    ranges = list(zip([None, *bounds], [*bounds, None]))
    gate = asyncio.Semaphore(max(1, concurrency))

    async def limited(coroutine):
        async with gate:
            return await coroutine

    parts = await asyncio.gather(*(limited(_list_range(store, prefix, *r)) for r in ranges))
    metas = [meta for part in parts for meta in part]
    own_marker = prefix.rstrip("/")
    by_path: dict[str, list[dict]] = {}
    for meta in metas:
        if meta["path"] == own_marker:
            continue  # the prefix's own "directory marker" (prefix/)
        by_path.setdefault(meta["path"], []).append(meta)
    doubtful = [path for path, group in by_path.items() if len(group) > 1 or group[0]["size"] == 0]
    found = await asyncio.gather(*(limited(head(store, path)) for path in doubtful))
    exact = dict(zip(doubtful, found))
    items: list[dict] = []
    for path, group in by_path.items():
        if path not in exact:
            items.append(_item(group[0]))
        elif exact[path] is not None:  # a file of this exact key (and, when listed twice, a marker "path/" too)
            meta = exact[path]
            match = [m for m in group if m["size"] == meta["size"] and m.get("e_tag") == meta.get("e_tag")]
            items.append(_item(match[0] if match else meta, path))
        # else: only markers "path/" of that name: nothing to download
    items.sort(key=lambda item: item["Key"])
    return items


def list_items(store, prefix: str, bounds: Sequence[str], concurrency: int) -> list[dict]:
    """The listed objects under `prefix` (ending in '/'), key ranges split after `bounds` listed in parallel."""
    return run_coroutine(_list(store, prefix, bounds, concurrency))


def _just_before(key: str) -> str | None:
    """A start-after for a listing whose first key is `key` when that object exists: the greatest string below
    `key` that a key can have (its last character one lower, then U+10FFFF up to S3's 1,024 bytes). None where
    that does not work as a path for object_store ('/', control characters, surrogates, a root key that sorts
    among keys starting with '/')."""
    lower = ord(key[-1]) - 1
    if lower < 0x20 or lower == ord("/") or 0xD800 <= lower <= 0xDFFF or key[0] <= "/":
        return None
    head_part = key[:-1] + chr(lower)
    return head_part + "\U0010ffff" * max(0, (1024 - len(head_part.encode())) // 4)


async def _exact(store, key: str) -> dict | None:
    offset = _just_before(key)
    if offset is None:
        return await head(store, key)
    parent = key.rsplit("/", 1)[0] + "/" if "/" in key else None

    async def once() -> dict | None:
        # One LIST request, as the botocore listing asks (Prefix=key, MaxKeys=1): a warm cache hit stays listings
        # only. The object sorts before every other key starting with it, so the first listed key at or after it
        # decides.
        async for chunk in obstore.list(store, prefix=parent, offset=offset, chunk_size=LIST_CHUNK):
            for meta in chunk:
                if meta["path"] < key:
                    continue  # only a key made of U+10FFFF characters sorts here
                if meta["path"] > key:
                    return None
                # "key" itself, or (only when no "key" exists) a directory marker "key/", which object_store
                # lists as "key": markers are empty, so an empty one is asked for by its exact key.
                return meta if meta["size"] > 0 else {"ask": True}
        return None

    found = await _again(once, f"listing {key}")
    if found is not None and found.get("ask"):
        return await head(store, key)
    return found


def head_item(store, key: str) -> dict | None:
    """The object whose key is exactly `key` (found by one LIST) as a listed item, or None."""
    meta = run_coroutine(_exact(store, key))
    return _item(meta, key) if meta is not None else None


def any_under(store, prefix: str) -> bool:
    """Whether any key (a marker included) starts with `prefix` (ending in '/')."""
    async def once() -> bool:
        async for chunk in obstore.list(store, prefix=prefix, chunk_size=1):
            if chunk:
                return True
        return False

    return run_coroutine(_again(once, f"listing {prefix}"))


__all__ = ["any_under", "head_item", "is_key_not_a_path", "list_items"]

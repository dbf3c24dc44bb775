"""Listing for ObjectStorageHook: the objects under a prefix of a bucket (key ranges in parallel), or under a local
directory, as ObjectInfo records checked for keys that cannot become file paths.

A bucket is listed by the engine the switch chooses for it (storage.obstore.store.store_for: storage.obstore.listing,
else storage.botocore.listing); both hand back the same items ({"Key", "Size", "ETag", "LastModified"}), which are
checked and recorded here alike."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from operators.storage.botocore import listing as botocore_listing
from operators.storage.errors import StorageError, translate_error
from operators.storage.location import (
    ObjectInfo,
    ObjectListing,
    StorageLocation,
    check_key,
    check_no_file_dir_clash,
    local_stamp,
    normalize_etag,
    timestamp,
)
from operators.storage.obstore.store import store_for

if TYPE_CHECKING:
    from operators.storage.remote import Remote

log = logging.getLogger("operators.storage.hook")


@contextmanager
def local_errors(action: str, path: str):
    """OS errors of a local path as one StorageError line."""
    try:
        yield
    except StorageError:
        raise
    except Exception as err:  # noqa: BLE001 - every failure becomes one actionable line
        log.debug("%s %s failed", action, path, exc_info=True)
        raise translate_error(err, action, path, None) from None


def _store(remote: Remote, bucket: str):
    """obstore's store of `bucket` when the engine switch says obstore (storage.obstore.store), else None."""
    return store_for(remote, bucket)


def remote_lists_through_obstore(remote: Remote, loc: StorageLocation) -> bool:
    return _store(remote, loc.bucket) is not None


def describe_remote(remote: Remote, concurrency: int, loc: StorageLocation, split_after: Sequence[str] = ()) -> ObjectListing:
    """What a bucket URI names (ObjectStorageHook.describe): a prefix, one object, or an empty prefix."""
    if not loc.key or loc.key.endswith("/"):
        return ObjectListing(loc, True, tuple(list_prefix(remote, concurrency, loc, loc.key, split_after)))
    objects = list_prefix(remote, concurrency, loc, loc.key + "/", split_after)
    if objects:
        return ObjectListing(loc, True, tuple(objects))
    item = exact_object(remote, loc)
    if item is not None:
        info = ObjectInfo(
            key=loc.key,
            relative_path=loc.key.rsplit("/", 1)[-1],
            size=int(item["Size"]),
            etag=normalize_etag(item.get("ETag")),
            last_modified=timestamp(item.get("LastModified")),
        )
        return ObjectListing(loc, False, (info,))
    return ObjectListing(loc, True, ())


def exact_object(remote: Remote, loc: StorageLocation) -> dict | None:
    """The listed item of the object whose key is exactly `loc.key`, or None."""
    store = _store(remote, loc.bucket)
    if store is not None:
        from operators.storage.obstore.listing import (
            head_item,  # lazy: obstore is optional (botocore lists without it)
        )

        return head_item(store, loc.key)
    return botocore_listing.exact_item(remote, loc.bucket, loc.key)


def any_key_under(remote: Remote, loc: StorageLocation, prefix: str) -> bool:
    """Whether some key (a directory marker included) of `loc`'s bucket starts with `prefix` (ending in '/')."""
    store = _store(remote, loc.bucket) if prefix else None
    if store is not None:
        from operators.storage.obstore.listing import (
            any_under,  # lazy: obstore is optional (botocore lists without it)
        )

        return any_under(store, prefix)
    return botocore_listing.any_under(remote, loc.bucket, prefix)


def list_prefix(
    remote: Remote, concurrency: int, loc: StorageLocation, prefix: str, split_after: Sequence[str] = ()
) -> list[ObjectInfo]:
    """The objects under `prefix` of `loc`'s bucket (see ObjectStorageHook.describe for `split_after`), listing key
    ranges on up to `concurrency` threads (botocore) or requests (obstore)."""
    # Range i holds the keys in (bounds[i-1], bounds[i]]: disjoint, and together every key under the prefix.
    bounds = sorted({k for k in split_after if k.startswith(prefix) and k > prefix})
    # object_store matches whole path segments and drops a leading '/': only "folder/" prefixes go through it.
    store = _store(remote, loc.bucket) if prefix.endswith("/") else None
    if store is not None:
        # lazy: obstore is optional (botocore lists without it)
        from operators.storage.obstore.listing import is_key_not_a_path, list_items

        try:
            items = list_items(store, prefix, bounds, concurrency)
        except Exception as err:
            if not is_key_not_a_path(err):
                raise
            log.info("a key under %s is no path for obstore; listing it through botocore to name it", loc.uri)
            items = botocore_listing.list_items(remote, loc.bucket, prefix, bounds, concurrency)
    else:
        items = botocore_listing.list_items(remote, loc.bucket, prefix, bounds, concurrency)
    objects: list[ObjectInfo] = []
    for item in items:
        key = item["Key"]
        if key.endswith("/"):
            continue  # "directory marker" objects created by consoles; nothing to download
        relative = key[len(prefix) :]
        check_key(relative, loc.uri, allow_trailing_slash=False, full_key=key)
        objects.append(
            ObjectInfo(
                key=key,
                relative_path=relative,
                size=int(item["Size"]),
                etag=normalize_etag(item.get("ETag")),
                last_modified=timestamp(item.get("LastModified")),
            )
        )
    check_no_file_dir_clash(objects, loc.uri)
    return objects


def describe_local(loc: StorageLocation) -> ObjectListing:
    path = loc.local_path or ""
    with local_errors("list", path):
        if os.path.isfile(path):
            st = os.stat(path)
            info = ObjectInfo(path, os.path.basename(path), st.st_size, local_stamp(st), st.st_mtime)
            return ObjectListing(loc, False, (info,))
        if not os.path.isdir(path):
            return ObjectListing(loc, True, ())
        objects: list[ObjectInfo] = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            # Symlinked directories are not followed (loops, escapes); symlinked files are read through.
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
            for name in sorted(files):
                full = os.path.join(root, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    log.warning("skipping dangling symlink %s", full)
                    continue
                if not os.path.isfile(full):
                    log.warning("skipping %s: not a regular file", full)
                    continue
                rel = os.path.relpath(full, path).replace(os.sep, "/")
                objects.append(ObjectInfo(full, rel, st.st_size, local_stamp(st), st.st_mtime))
        return ObjectListing(loc, True, tuple(objects))


__all__ = ["any_key_under", "describe_local", "describe_remote", "exact_object", "list_prefix",
           "remote_lists_through_obstore"]

"""The shared data cache: each input channel is downloaded once into the workspace cache, jobs get views.

This is the "warm once, mount into many jobs" pattern (SFS Turbo in seed 004). Design decisions:

Cache key. sha256 over (the normalised URI, the connection id, and the sorted (key, size, ETag) of every
listed object). A warm check therefore costs the LIST requests only, and zero object bytes. Any changed,
added or removed object gives a different key, i.e. a new entry: the old entry of that channel is simply
no longer used (and ages out by LRU), entries of other channels are untouched. For local sources the
"ETag" is a stamp of (mtime, size, inode).

Listing in parallel. A warm check is only the listing, and S3 hands out a large prefix one page (1,000 keys)
after another: each page's continuation token is in the previous page. So after each listing of more than one
page we keep every 1,000th key in cache/listings/<hash of connection and URI>.json; the next listing of that
URI cuts the key space at those keys and lists the ranges in parallel (ObjectStorageHook.describe's
split_after). The keys are only split points: whatever changed since, the ranges together list every key.

Complete or absent. An entry is built in cache/tmp-<key>-<random>/, the manifest marker `.complete` is
written (and fsynced) last, then the directory is renamed to cache/<key>/ in one step. Only a directory
named <key> that holds a readable `.complete` for that key counts as an entry; a download killed half-way
leaves only a tmp-* directory, which the next prefetch of that key (or any sweep, once nobody holds that
key's lock) removes before downloading again. Object downloads use If-Match with the listed ETag, so
the bytes that land are exactly the listed versions the key was computed from.

Locking, pins (users), LRU eviction, expiry and sweeping live in operators/cache/eviction.py (CacheEntries, which
DataCacheHook extends); a job's view of an entry (input/data/<channel>) in operators/cache/views.py.

Disk space. The listing gives every object's size, so a cold prefetch checks the cache's file system first
(disk_space.entry_space: sizes rounded up to blocks, plus the entry's own files); when the entry cannot fit, unused
entries are evicted, least recently used first, and if it still cannot fit the prefetch fails before its first GET
with the figures (DiskFullError). A disk that fills during the download (another writer) gives the same one line;
the tmp-* directory is removed, nothing of the entry is visible.

The entry's files and directories are made read-only so a job writing through its view fails instead of
corrupting the shared copy (root ignores mode bits: mount read-only where jobs run as root).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from operators.cache.eviction import (
    COMPLETE_MARKER,
    DATA_DIR,
    LAST_USED,
    TMP_PREFIX,
    USERS_DIR,
    CacheEntries,
    touch,
    user_file_name,
)
from operators.storage.disk_space import cache_full, entry_space, fits, is_disk_full
from operators.storage.hook import (
    ObjectListing,
    ObjectStorageHook,
    StorageError,
    parse_uri,
)

log = logging.getLogger(__name__)

OBJECTS_FILE = "objects.json"  # [[relative path, size, etag], ...] of the listing the key was computed from
LISTINGS_DIR = "listings"  # per channel URI: split keys of its last listing (see _write_listing_hints)
LIST_PAGE = 1000  # keys per LIST page (the S3 maximum)
_MANIFEST_VERSION = 1


@dataclass(frozen=True)
class CacheEntry:
    """A complete cache entry, as returned by prefetch.

    `path` is the directory with the channel's content (what input/data/<channel> shows; mount this);
    for a single-object channel it holds that one file, named `file_name`.
    """

    path: str
    key: str
    is_file: bool
    files: int
    bytes: int
    bytes_transferred: int
    reused: bool
    file_name: str | None = None
    uri: str = ""

    @property
    def entry_dir(self) -> str:
        return os.path.dirname(self.path)

    @property
    def file_path(self) -> str | None:
        return os.path.join(self.path, self.file_name) if self.file_name else None


def cache_key(listing: ObjectListing, connection_id: str | None) -> str:
    """sha256 of (normalised URI, connection id, sorted (key, size, etag) of the listed objects)."""
    payload = {
        "v": _MANIFEST_VERSION,
        "uri": listing.normalized_uri,
        "connection": connection_id or "",
        "objects": sorted([o.key, o.size, o.etag] for o in listing.objects),
    }
    return hashlib.sha256(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()).hexdigest()


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _make_read_only(root: str) -> None:
    for current, dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(current, name)
            mode = os.lstat(path).st_mode
            os.chmod(path, 0o555 if mode & stat.S_IXUSR else 0o444)
        os.chmod(current, 0o555)


class DataCacheHook(CacheEntries):
    """Prefetch channels into `cache_dir` (the workspace cache/); jobs see entries through cache_views.link_view.

    :param cache_dir: the cache directory (TrainingSettings.cache_dir).
    :param storage_hook: the ObjectStorageHook used to list and download (its connections apply).
    :param max_bytes: size limit for LRU eviction; 0 = unlimited.
    """

    def __init__(self, cache_dir: str, storage_hook: ObjectStorageHook, max_bytes: int = 0) -> None:
        super().__init__(cache_dir, max_bytes)
        self.storage = storage_hook

    # -- filling ------------------------------------------------------------------------------------------------

    def _entry_from_manifest(self, key: str, manifest: dict, *, transferred: int, reused: bool) -> CacheEntry:
        return CacheEntry(
            path=os.path.join(self._entry_dir(key), DATA_DIR),
            key=key,
            is_file=bool(manifest.get("is_file")),
            files=int(manifest.get("files", 0)),
            bytes=int(manifest.get("bytes", 0)),
            bytes_transferred=transferred,
            reused=reused,
            file_name=manifest.get("file_name"),
            uri=str(manifest.get("uri", "")),
        )

    def prefetch(self, uri: str, user: str, check_key: Callable[[str], None] | None = None) -> CacheEntry:
        """Make sure the channel at `uri` is a complete cache entry, mark it in use by `user`, return it.

        Warm: one listing, zero object bytes. Cold: download into tmp-*, marker last, rename into place.
        `check_key`: called with the listing's key (the channel's data version) before anything is downloaded or
        marked; what it raises ends the prefetch (a reproduction's pin: operators/engine/transfers.py).
        """
        if not user:
            raise ValueError("prefetch needs the user (the job name) that will use the entry")
        hints_path = self._listing_hints_path(uri)
        listing = self.storage.describe(uri, split_after=self._read_listing_hints(hints_path))
        loc = listing.location
        store = self.storage.store(loc)
        conn_id = store.connection_id
        self._write_listing_hints(hints_path, listing)
        if not listing.objects:
            raise StorageError(
                f"nothing to prefetch at {store.name(loc)}{store.via}: no such object, and no objects under that prefix; "
                "check the channel's URI",
                permanent=True,
            )
        key = cache_key(listing, conn_id)
        if check_key is not None:
            check_key(key)
        os.makedirs(self.cache_dir, exist_ok=True)
        with self._locked(key):
            manifest = self._read_manifest(key)
            if manifest is not None:
                self._mark_used(key, user)
                entry = self._entry_from_manifest(key, manifest, transferred=0, reused=True)
                log.info(
                    "channel %s: cache hit %s (%d files, %d bytes), nothing transferred",
                    listing.normalized_uri,
                    key[:16],
                    entry.files,
                    entry.bytes,
                )
            else:
                entry = self._fill(key, listing, conn_id, user)
        if self.max_bytes:
            self.evict()
        return entry

    # -- listing hints ------------------------------------------------------------------------------------------

    def _listing_hints_path(self, uri: str) -> str | None:
        """Where the split keys of this URI's last listing are kept (None for local paths: no LIST pages)."""
        try:
            loc = parse_uri(uri)
        except StorageError:
            return None  # describe() raises the one-line error
        store = self.storage.store(loc)
        if not store.lists_in_pages:
            return None
        name = hashlib.sha256(f"{store.connection_id}\n{loc.uri.rstrip('/')}".encode()).hexdigest()
        return os.path.join(self.cache_dir, LISTINGS_DIR, name[:32] + ".json")

    @staticmethod
    def _read_listing_hints(path: str | None) -> list[str]:
        if path is None:
            return []
        try:
            with open(path, encoding="utf-8") as fh:
                keys = json.load(fh)
        except (OSError, ValueError):
            return []
        return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []

    def _write_listing_hints(self, path: str | None, listing: ObjectListing) -> None:
        """Every LIST_PAGE-th key of a listing of more than one page: next time the pages are listed in parallel.

        (Why: a warm check is nothing but this listing, and its pages come one after another because each
        page's continuation token is in the previous page; ranges cut at known keys need no token.)
        """
        if path is None:
            return
        keys = [o.key for o in listing.objects[LIST_PAGE - 1 : -1 : LIST_PAGE]]
        if keys == self._read_listing_hints(path) or (not keys and not os.path.exists(path)):
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            temp = f"{path}.{os.urandom(4).hex()}.tmp"
            with open(temp, "w", encoding="utf-8") as fh:
                json.dump(keys, fh)
            os.replace(temp, path)
        except OSError:
            log.debug("could not write listing hints %s", path, exc_info=True)  # only an optimisation

    def _fill(self, key: str, listing: ObjectListing, conn_id: str | None, user: str) -> CacheEntry:
        """Build the entry (caller holds the key's lock)."""
        entry_dir = self._entry_dir(key)
        if os.path.lexists(entry_dir):
            log.warning("cache entry %s is incomplete or damaged; rebuilding it", key[:16])
            self._discard(entry_dir)
        self._remove_abandoned(key)
        if self.max_bytes:
            self.evict(reserve=listing.total_bytes)
        # Fail before the first byte when the entry cannot fit (the listing gives every size), with the figures.
        needed, files = entry_space((o.size for o in listing.objects), self.cache_dir)
        self._make_room(needed, files)
        if not fits(self.cache_dir, needed, files):
            raise cache_full(listing.normalized_uri, self.cache_dir, needed, files)
        try:
            tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{key}-", dir=self.cache_dir)
        except OSError as err:
            if is_disk_full(err):
                raise cache_full(listing.normalized_uri, self.cache_dir, needed, files) from None
            raise
        try:
            data = os.path.join(tmp, DATA_DIR)
            os.makedirs(data)
            is_file = not listing.is_prefix
            file_name = listing.objects[0].relative_path if is_file else None
            target = os.path.join(data, file_name) if file_name else data
            stats = self.storage.download_listing(listing, target)
            _make_read_only(data)
            manifest = {
                "version": _MANIFEST_VERSION,
                "key": key,
                "uri": listing.normalized_uri,
                "connection": conn_id or "",
                "is_file": is_file,
                "file_name": file_name,
                "files": len(listing.objects),
                "bytes": listing.total_bytes,
                "created": time.time(),
            }
            # The object list goes into its own file: the marker is read on every warm hit and by every eviction
            # pass, and with 10,000 objects the list made it ~600 KB of JSON to parse each time.
            with open(os.path.join(tmp, OBJECTS_FILE), "w", encoding="utf-8") as fh:
                json.dump([[o.relative_path, o.size, o.etag] for o in listing.objects], fh, separators=(",", ":"))
            os.makedirs(os.path.join(tmp, USERS_DIR))
            touch(os.path.join(tmp, USERS_DIR, user_file_name(user)))
            touch(os.path.join(tmp, LAST_USED))
            # The marker goes last, durably: whatever crashes before this line leaves no complete entry.
            marker = os.path.join(tmp, COMPLETE_MARKER)
            with open(marker + ".part", "w", encoding="utf-8") as fh:
                json.dump(manifest, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(marker + ".part", marker)
            _fsync_dir(tmp)
            os.chmod(tmp, 0o755)
            os.rename(tmp, entry_dir)
            _fsync_dir(self.cache_dir)
        except BaseException as err:
            self._discard(tmp)
            if is_disk_full(err):  # filled while downloading (another writer, or the estimate was short)
                raise cache_full(listing.normalized_uri, self.cache_dir, needed, files) from None
            raise
        log.info(
            "channel %s: cached as %s (%d files, %d bytes transferred)",
            listing.normalized_uri,
            key[:16],
            stats.files,
            stats.bytes,
        )
        return self._entry_from_manifest(key, manifest, transferred=stats.bytes, reused=False)


__all__ = ["CacheEntry", "DataCacheHook", "cache_key"]

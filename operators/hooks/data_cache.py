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

Locking. One `fcntl.flock` lock file per key (cache/locks/<key>.lock), held from the completeness check to
the rename and user registration. Two jobs prefetching the same channel serialise: the second waits and
then finds the entry complete (zero bytes). flock is released by the kernel when a holder dies, so a
killed prefetch never wedges the key. Lock files are tiny and never deleted (deleting a lock file races
with a process about to lock it).

In use and LRU. prefetch(uri, user=job_name) records the user as cache/<key>/users/u-<user> (one file per
user: creating/removing it is atomic, no read-modify-write) and touches cache/<key>/last_used; release(user)
removes that user's records. With max_bytes > 0, eviction removes the least recently used entries that
have no users until the total is at most max_bytes; it takes each victim's lock without waiting (skips
busy ones), re-checks that it is unused, renames it to trash-* (so it vanishes atomically) and deletes it.
An entry in use is never evicted, even if that leaves the cache over its limit (logged).

The view (link_view). A directory channel becomes ONE relative symlink input/data/<channel> ->
../../../../cache/<key>/data (read-only content). Why a symlink rather than a tree of hard links:
- a warm channel costs one metadata operation, whatever the number of files (10,000 hard links would
  cost 10,000 link calls and inodes' link counts, per job);
- it works across file systems (hard links need the job dir and the cache on one file system);
- relative, so it resolves wherever the whole workspace is mounted (same tree on every worker/pod).
Where a backend mounts only the job root (Kubernetes subPath, a Docker bind mount of the job dir), the
symlink cannot resolve in any case; those backends mount the entry (LaunchRequest.channel_entries)
read-only at input/data/<channel>, which is what CacheEntry.path is for. `mode="hardlink"` builds a
self-contained tree of hard links instead (symlinks per file where hard links fail, e.g. cross-device)
for callers that need the job dir to stand alone. A single-object channel becomes a directory
input/data/<channel>/ holding one link named after the object (`CacheEntry.file_name`).

Disk space. The listing gives every object's size, so a cold prefetch checks the cache's file system first
(disk_space.entry_space: sizes rounded up to blocks, plus the entry's own files); when the entry cannot fit, unused
entries are evicted, least recently used first, and if it still cannot fit the prefetch fails before its first GET
with the figures (DiskFullError). A disk that fills during the download (another writer) gives the same one line;
the tmp-* directory is removed, nothing of the entry is visible.

The entry's files and directories are made read-only so a job writing through its view fails instead of
corrupting the shared copy (root ignores mode bits: mount read-only where jobs run as root).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import quote

from operators.hooks.disk_space import cache_full, entry_space, fits, is_disk_full
from operators.hooks.object_storage import (
    ObjectListing,
    ObjectStorageHook,
    StorageError,
    parse_uri,
)
from operators.safe_tar import remove_tree, replace_directory

log = logging.getLogger(__name__)

DATA_DIR = "data"
COMPLETE_MARKER = ".complete"
OBJECTS_FILE = "objects.json"  # [[relative path, size, etag], ...] of the listing the key was computed from
USERS_DIR = "users"
LAST_USED = "last_used"
LOCKS_DIR = "locks"
LISTINGS_DIR = "listings"  # per channel URI: split keys of its last listing (see _write_listing_hints)
LIST_PAGE = 1000  # keys per LIST page (the S3 maximum)
TMP_PREFIX = "tmp-"
TRASH_PREFIX = "trash-"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
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


@dataclass(frozen=True)
class CacheEntryInfo:
    key: str
    entry_dir: str
    uri: str
    bytes: int
    last_used: float
    users: tuple[str, ...]


def cache_key(listing: ObjectListing, connection_id: str | None) -> str:
    """sha256 of (normalised URI, connection id, sorted (key, size, etag) of the listed objects)."""
    payload = {
        "v": _MANIFEST_VERSION,
        "uri": listing.normalized_uri,
        "connection": connection_id or "",
        "objects": sorted([o.key, o.size, o.etag] for o in listing.objects),
    }
    return hashlib.sha256(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()).hexdigest()


def _user_file_name(user: str) -> str:
    # Job names are DNS-1123-safe, but never trust a name on the file system: quote it, and prefix it so
    # "." or ".." cannot name a directory.
    return "u-" + quote(str(user), safe="-_.")


def _touch(path: str) -> None:
    with open(path, "a"):
        pass
    os.utime(path, None)


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


class DataCacheHook:
    """Prefetch channels into `cache_dir` (the workspace cache/) and give jobs views of the entries.

    :param cache_dir: the cache directory (TrainingSettings.cache_dir).
    :param storage_hook: the ObjectStorageHook used to list and download (its connections apply).
    :param max_bytes: size limit for LRU eviction; 0 = unlimited.
    """

    def __init__(self, cache_dir: str, storage_hook: ObjectStorageHook, max_bytes: int = 0) -> None:
        self.cache_dir = os.path.abspath(cache_dir)
        self.storage = storage_hook
        self.max_bytes = max(0, int(max_bytes or 0))

    # -- locking ------------------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self, key: str, *, wait: bool = True) -> Iterator[bool]:
        """Hold the key's flock; yields False (without the lock) when wait=False and it is busy."""
        locks = os.path.join(self.cache_dir, LOCKS_DIR)
        os.makedirs(locks, exist_ok=True)
        fd = os.open(os.path.join(locks, key + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    yield False
                    return
                log.info("cache entry %s is being prefetched by another task; waiting for it", key[:16])
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield True
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    # -- entries ------------------------------------------------------------------------------------------------

    def _entry_dir(self, key: str) -> str:
        return os.path.join(self.cache_dir, key)

    def _read_manifest(self, key: str) -> dict | None:
        """The manifest of a complete entry, or None if the entry is absent or not complete."""
        try:
            with open(os.path.join(self._entry_dir(key), COMPLETE_MARKER), encoding="utf-8") as fh:
                manifest = json.load(fh)
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or manifest.get("key") != key:
            return None
        if not os.path.isdir(os.path.join(self._entry_dir(key), DATA_DIR)):
            return None
        return manifest

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

    def prefetch(self, uri: str, user: str) -> CacheEntry:
        """Make sure the channel at `uri` is a complete cache entry, mark it in use by `user`, return it.

        Warm: one listing, zero object bytes. Cold: download into tmp-*, marker last, rename into place.
        """
        if not user:
            raise ValueError("prefetch needs the user (the job name) that will use the entry")
        hints_path = self._listing_hints_path(uri)
        listing = self.storage.describe(uri, split_after=self._read_listing_hints(hints_path))
        loc = listing.location
        conn_id = None if loc.is_local else self.storage.connection_id(loc.scheme)
        self._write_listing_hints(hints_path, listing)
        if not listing.objects:
            where = loc.local_path if loc.is_local else loc.uri
            via = "" if loc.is_local else f" via connection '{conn_id}'"
            raise StorageError(
                f"nothing to prefetch at {where}{via}: no such object, and no objects under that prefix; "
                "check the channel's URI",
                permanent=True,
            )
        key = cache_key(listing, conn_id)
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
        if loc.is_local:
            return None
        name = hashlib.sha256(f"{self.storage.connection_id(loc.scheme)}\n{loc.uri.rstrip('/')}".encode()).hexdigest()
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
            _touch(os.path.join(tmp, USERS_DIR, _user_file_name(user)))
            _touch(os.path.join(tmp, LAST_USED))
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

    def _make_room(self, needed: int, files: int) -> None:
        """On a disk too full for the next entry, evict unused entries (least recently used first) until it fits:
        they are only a cache, whatever cache_max_bytes allows."""
        if fits(self.cache_dir, needed, files):
            return
        self.sweep()
        for info in self.entries():
            if fits(self.cache_dir, needed, files):
                return
            if info.users:
                continue
            with self._locked(info.key, wait=False) as got:
                current = self._info(info.key) if got else None
                if current is None or current.users:
                    continue
                self._discard(info.entry_dir)
            log.info("cache: evicted %s (%s, %d bytes, unused) to make room on a full disk", info.key[:16], info.uri,
                     info.bytes)

    def _mark_used(self, key: str, user: str) -> None:
        entry_dir = self._entry_dir(key)
        os.makedirs(os.path.join(entry_dir, USERS_DIR), exist_ok=True)
        _touch(os.path.join(entry_dir, USERS_DIR, _user_file_name(user)))
        _touch(os.path.join(entry_dir, LAST_USED))

    def release(self, user: str) -> list[str]:
        """Forget that `user` (a job name) uses any entry; returns the keys it held."""
        released = []
        name = _user_file_name(user)
        for key in self._keys():
            try:
                os.unlink(os.path.join(self._entry_dir(key), USERS_DIR, name))
            except FileNotFoundError:
                continue
            try:
                _touch(os.path.join(self._entry_dir(key), LAST_USED))  # LRU counts from the last release
            except OSError:
                pass
            released.append(key)
        return released

    def pin_age(self, key: str, user: str, now: float) -> float | None:
        """Seconds since `user` pinned entry `key` (None when it does not)."""
        try:
            return now - os.stat(os.path.join(self._entry_dir(key), USERS_DIR, _user_file_name(user))).st_mtime
        except OSError:
            return None

    def release_pin(self, key: str, user: str) -> bool:
        """Drop one pin (a dead job's: see retention.py); True when there was one."""
        try:
            os.unlink(os.path.join(self._entry_dir(key), USERS_DIR, _user_file_name(user)))
        except FileNotFoundError:
            return False
        return True

    def expire(self, max_age: float, now: float) -> list[str]:
        """Discard entries nobody pins that were not used for `max_age` seconds (the retention setting)."""
        expired = []
        for info in self.entries():
            if info.users or now - info.last_used <= max_age:
                continue
            with self._locked(info.key, wait=False) as got:
                current = self._info(info.key) if got else None
                if current is None or current.users or now - current.last_used <= max_age:
                    continue
                self._discard(info.entry_dir)
            expired.append(info.key)
            log.info("cache: expired %s (%s, %d bytes, unused for %.1f days)", info.key[:16], info.uri, info.bytes,
                     (now - info.last_used) / 86400)
        return expired

    # -- inspection and eviction --------------------------------------------------------------------------------

    def _keys(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.cache_dir) if _KEY_RE.match(n)]
        except FileNotFoundError:
            return []

    def _info(self, key: str) -> CacheEntryInfo | None:
        manifest = self._read_manifest(key)
        if manifest is None:
            return None
        entry_dir = self._entry_dir(key)
        try:
            users = tuple(sorted(os.listdir(os.path.join(entry_dir, USERS_DIR))))
        except FileNotFoundError:
            users = ()
        try:
            last_used = os.stat(os.path.join(entry_dir, LAST_USED)).st_mtime
        except FileNotFoundError:
            last_used = float(manifest.get("created", 0))
        return CacheEntryInfo(
            key=key,
            entry_dir=entry_dir,
            uri=str(manifest.get("uri", "")),
            bytes=int(manifest.get("bytes", 0)),
            last_used=last_used,
            users=tuple(u[2:] if u.startswith("u-") else u for u in users),
        )

    def entries(self) -> list[CacheEntryInfo]:
        """Complete entries, least recently used first."""
        infos = [info for key in self._keys() if (info := self._info(key)) is not None]
        return sorted(infos, key=lambda i: i.last_used)

    def total_bytes(self) -> int:
        return sum(i.bytes for i in self.entries())

    def evict(self, reserve: int = 0) -> list[str]:
        """Evict unused entries, least recently used first, until total + reserve <= max_bytes."""
        self.sweep()
        if not self.max_bytes:
            return []
        infos = self.entries()
        total = sum(i.bytes for i in infos)
        evicted: list[str] = []
        for info in infos:
            if total + reserve <= self.max_bytes:
                break
            if info.users:
                continue
            with self._locked(info.key, wait=False) as got:
                if not got:
                    continue  # being prefetched right now: in use
                current = self._info(info.key)
                if current is None or current.users:
                    continue
                self._discard(info.entry_dir)
            total -= info.bytes
            evicted.append(info.key)
            log.info("cache: evicted %s (%s, %d bytes, unused)", info.key[:16], info.uri, info.bytes)
        if total + reserve > self.max_bytes:
            log.warning(
                "cache: %d bytes in entries in use (+%d to come) exceed cache_max_bytes=%d; nothing more can be "
                "evicted until jobs release their entries",
                total,
                reserve,
                self.max_bytes,
            )
        return evicted

    def sweep(self) -> int:
        """Remove leftovers of killed prefetches (tmp-* nobody is filling) and of interrupted evictions."""
        removed = 0
        try:
            names = os.listdir(self.cache_dir)
        except FileNotFoundError:
            return 0
        for name in names:
            path = os.path.join(self.cache_dir, name)
            if name.startswith(TRASH_PREFIX):
                remove_tree(path)
                removed += 1
            elif name.startswith(TMP_PREFIX):
                key = name[len(TMP_PREFIX) :].split("-", 1)[0]
                if not _KEY_RE.match(key):
                    continue
                with self._locked(key, wait=False) as got:
                    if got and os.path.lexists(path):
                        log.info("cache: removing %s left by an interrupted prefetch", name)
                        remove_tree(path)
                        removed += 1
        return removed

    def _remove_abandoned(self, key: str) -> None:
        """Remove tmp-<key>-* (caller holds the key's lock, so nobody is filling them)."""
        for name in os.listdir(self.cache_dir):
            if name.startswith(f"{TMP_PREFIX}{key}-"):
                log.info("cache: removing %s left by an interrupted prefetch", name)
                remove_tree(os.path.join(self.cache_dir, name))

    def _discard(self, path: str) -> None:
        """Make `path` vanish in one rename, then delete it."""
        if not os.path.lexists(path):
            return
        trash = os.path.join(self.cache_dir, f"{TRASH_PREFIX}{os.urandom(6).hex()}")
        try:
            os.rename(path, trash)
        except OSError:
            trash = path
        remove_tree(trash)

    # -- views --------------------------------------------------------------------------------------------------

    def link_view(self, entry: CacheEntry, dest: str, *, mode: str = "symlink") -> str:
        """Make `dest` (a job's input/data/<channel>) show the entry; replaces what was there atomically.

        Directory entry, mode "symlink": dest is one relative symlink to the entry's data dir.
        Directory entry, mode "hardlink": dest is a directory tree of hard links (symlinks where hard links
        are impossible). Single-object entry: dest is a directory holding one link named `entry.file_name`.
        """
        if mode not in ("symlink", "hardlink"):
            raise ValueError(f"link_view mode must be 'symlink' or 'hardlink', not {mode!r}")
        dest = os.path.abspath(dest)
        parent = os.path.dirname(dest)
        os.makedirs(parent, exist_ok=True)
        name = os.path.basename(dest)
        if not entry.is_file and mode == "symlink":
            staged = os.path.join(parent, f".{name}.view-{os.urandom(4).hex()}")
            os.symlink(os.path.relpath(entry.path, parent), staged)
        else:
            staged = tempfile.mkdtemp(prefix=f".{name}.view-", dir=parent)
            os.chmod(staged, 0o755)
            try:
                if entry.is_file:
                    link = os.path.join(staged, entry.file_name or "")
                    self._link_file(entry.file_path or "", link, dest_dir=dest, mode=mode)
                else:
                    self._link_tree(entry.path, staged, dest_dir=dest)
            except BaseException:
                remove_tree(staged)
                raise
        try:
            replace_directory(staged, dest)
        except BaseException:
            remove_tree(staged)
            raise
        return dest

    @staticmethod
    def _link_file(source: str, link: str, *, dest_dir: str, mode: str) -> None:
        """Hard link (mode 'hardlink') or relative symlink; `dest_dir` is where `link`'s directory will end up."""
        if mode == "hardlink":
            try:
                os.link(source, link)
                return
            except OSError as err:
                if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
                    raise
        os.symlink(os.path.relpath(source, dest_dir), link)  # `link` sits at the top of the view

    def _link_tree(self, source_root: str, staged_root: str, *, dest_dir: str) -> None:
        for current, dirs, files in os.walk(source_root):
            rel = os.path.relpath(current, source_root)
            target_dir = staged_root if rel == "." else os.path.join(staged_root, rel)
            final_dir = dest_dir if rel == "." else os.path.join(dest_dir, rel)
            os.makedirs(target_dir, exist_ok=True)
            for name in files:
                source = os.path.join(current, name)
                link = os.path.join(target_dir, name)
                try:
                    os.link(source, link)
                except OSError as err:
                    if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
                        raise
                    os.symlink(os.path.relpath(source, final_dir), link)


__all__ = ["CacheEntry", "CacheEntryInfo", "DataCacheHook", "cache_key"]

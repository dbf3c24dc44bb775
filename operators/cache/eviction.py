"""The data cache's complete entries on disk: who pins them, when they were last used, and removing them.

The fill path (operators/cache/data_cache.py) builds on this: it takes the same per-key locks, marks its user the same way and
discards damaged entries through the same rename-then-delete.

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
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import quote

from operators.storage.disk_space import fits
from operators.fs.directories import remove_tree

log = logging.getLogger(__name__)

DATA_DIR = "data"
COMPLETE_MARKER = ".complete"
USERS_DIR = "users"
LAST_USED = "last_used"
LOCKS_DIR = "locks"
TMP_PREFIX = "tmp-"
TRASH_PREFIX = "trash-"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class CacheEntryInfo:
    key: str
    entry_dir: str
    uri: str
    bytes: int
    last_used: float
    users: tuple[str, ...]


def user_file_name(user: str) -> str:
    # Job names are DNS-1123-safe, but never trust a name on the file system: quote it, and prefix it so
    # "." or ".." cannot name a directory.
    return "u-" + quote(str(user), safe="-_.")


def touch(path: str) -> None:
    with open(path, "a"):
        pass
    os.utime(path, None)


class CacheEntries:
    """The complete entries in `cache_dir` (the workspace cache/): pins, expiry, LRU eviction, sweeping.

    :param cache_dir: the cache directory (TrainingSettings.cache_dir).
    :param max_bytes: size limit for LRU eviction; 0 = unlimited.
    """

    def __init__(self, cache_dir: str, max_bytes: int = 0) -> None:
        self.cache_dir = os.path.abspath(cache_dir)
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

    # -- pins and expiry ----------------------------------------------------------------------------------------

    def _mark_used(self, key: str, user: str) -> None:
        entry_dir = self._entry_dir(key)
        os.makedirs(os.path.join(entry_dir, USERS_DIR), exist_ok=True)
        touch(os.path.join(entry_dir, USERS_DIR, user_file_name(user)))
        touch(os.path.join(entry_dir, LAST_USED))

    def release(self, user: str) -> list[str]:
        """Forget that `user` (a job name) uses any entry; returns the keys it held."""
        released = []
        name = user_file_name(user)
        for key in self._keys():
            try:
                os.unlink(os.path.join(self._entry_dir(key), USERS_DIR, name))
            except FileNotFoundError:
                continue
            try:
                touch(os.path.join(self._entry_dir(key), LAST_USED))  # LRU counts from the last release
            except OSError:
                pass
            released.append(key)
        return released

    def pin_age(self, key: str, user: str, now: float) -> float | None:
        """Seconds since `user` pinned entry `key` (None when it does not)."""
        try:
            return now - os.stat(os.path.join(self._entry_dir(key), USERS_DIR, user_file_name(user))).st_mtime
        except OSError:
            return None

    def release_pin(self, key: str, user: str) -> bool:
        """Drop one pin (a dead job's: see retention.py); True when there was one."""
        try:
            os.unlink(os.path.join(self._entry_dir(key), USERS_DIR, user_file_name(user)))
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


__all__ = ["CacheEntries", "CacheEntryInfo", "user_file_name", "touch"]

"""The SDK's code staging area, per user: `<workspace>/staging/code/<user>/<sha256>.tar.gz`.

Each user's uploads live in a directory of their own, so a spec's source_dir can be checked against the run's
triggering user (operators/settings.TrainingSettings.platform_areas_for): one user's uploaded code is never another
user's source_dir, and a quota counts what one user keeps there.

An archive expires [training] sdk_code_expiry_days after it was last uploaded (an upload of the same code refreshes
it): `expire` removes one user's expired archives (when that user uploads or lists), `expire_all` every user's (the
workspace's garbage collection, operators/state/retention.py); either keeps an archive that a kept lineage record of a
run with a model names, when the caller passes them (`kept`: operators/state/retention.py kept_archives). Partial uploads that nothing has
written to for STALE_PARTIAL_SECONDS (a server killed mid-upload) go the same way, so they stop counting against the
quota.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from dataclasses import dataclass
from typing import Callable, Collection, Iterator

ARCHIVE = re.compile(r"^[0-9a-f]{64}\.tar\.gz$")  # <sha256 of the archive>.tar.gz
PARTIAL_SUFFIX = ".partial"  # an upload being written: .<sha prefix>.<random>.partial
LOCK_NAME = ".quota.lock"  # empty; flock'ed while an upload checks the quota and keeps its archive
STALE_PARTIAL_SECONDS = 3600.0
DAY = 86400.0


def _files(directory: str) -> list[os.DirEntry]:
    try:
        return [entry for entry in os.scandir(directory) if entry.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _size(entry: os.DirEntry) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:  # removed since it was listed
        return 0


def used_bytes(directory: str, *, besides: str | tuple[str, ...] = (), archives_only: bool = False) -> int:
    """Bytes of the regular files in one user's staging directory, partial uploads included unless `archives_only`
    (`besides` not counted: the upload asking, and the archive it replaces)."""
    skip = {besides} if isinstance(besides, str) else set(besides)
    return sum(_size(entry) for entry in _files(directory)
               if entry.path not in skip and (not archives_only or ARCHIVE.match(entry.name)))


@dataclass(frozen=True)
class Staged:
    name: str  # <sha256>.tar.gz
    path: str  # the source_dir a spec names
    bytes: int
    mtime: float  # its last upload


def staged_archives(directory: str) -> list[Staged]:
    """One user's archives, the latest upload first (partial uploads and the lock file are not archives)."""
    staged = []
    for entry in _files(directory):
        if ARCHIVE.match(entry.name):
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            staged.append(Staged(entry.name, entry.path, info.st_size, info.st_mtime))
    return sorted(staged, key=lambda s: (-s.mtime, s.name))


def expire(directory: str, expiry_days: float, now: float | None = None,
           kept: Callable[[], Collection[str]] | None = None) -> list[str]:
    """Remove one user's archives last uploaded more than `expiry_days` ago (0: never) and their partial uploads
    nothing wrote to for STALE_PARTIAL_SECONDS; the names removed. `kept`: the sha256s of archives that stay whatever
    their age, asked only once one has expired (operators/state/retention.py kept_archives: those the kept lineage
    records of runs with a model name, since a model is reproduced from its code)."""
    now = time.time() if now is None else now
    removed = []
    for entry in _files(directory):
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue
        expired = ARCHIVE.match(entry.name) and expiry_days > 0 and age > expiry_days * DAY
        if expired and kept is not None and entry.name[:-len(".tar.gz")] in kept():
            continue
        if expired or (entry.name.endswith(PARTIAL_SUFFIX) and age > STALE_PARTIAL_SECONDS):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed


def expire_all(code_staging_dir: str, expiry_days: float, now: float | None = None,
               kept: Callable[[], Collection[str]] | None = None) -> list[str]:
    """`expire` in every user's directory (`kept`: as there); the removed archives as "<user dir>/<name>"."""
    removed = []
    try:
        users = sorted(e.name for e in os.scandir(code_staging_dir) if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []
    for user in users:
        removed += [f"{user}/{name}" for name in expire(os.path.join(code_staging_dir, user), expiry_days, now, kept)]
    return removed


@contextlib.contextmanager
def quota_lock(directory: str) -> Iterator[None]:
    """One user's uploads check the quota and keep their archive one at a time (across the API server's workers):
    a short exclusive flock of an empty file in the user's directory (a file, not the directory: NFS locks files)."""
    fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock

"""A job's view of a data cache entry: input/data/<channel> shows the entry without copying it.

A directory channel becomes ONE relative symlink input/data/<channel> -> ../../../../cache/<key>/data
(read-only content). Why a symlink rather than a tree of hard links:
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
"""

from __future__ import annotations

import errno
import os
import tempfile
from typing import TYPE_CHECKING

from operators.fs.directories import remove_tree, replace_directory

if TYPE_CHECKING:
    from operators.cache.data_cache import CacheEntry


def link_view(entry: CacheEntry, dest: str, *, mode: str = "symlink") -> str:
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
                _link_file(entry.file_path or "", link, dest_dir=dest, mode=mode)
            else:
                _link_tree(entry.path, staged, dest_dir=dest)
        except BaseException:
            remove_tree(staged)
            raise
    try:
        replace_directory(staged, dest)
    except BaseException:
        remove_tree(staged)
        raise
    return dest


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


def _link_tree(source_root: str, staged_root: str, *, dest_dir: str) -> None:
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


__all__ = ["link_view"]

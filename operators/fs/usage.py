"""What a directory tree holds on its disk, counted as the disk counts it: allocated blocks (st_blocks x 512, not
st_size: a sparse file holds less than it claims), each inode once however many names it has (32 hard links of one
file are one file), no link followed: every directory is opened O_NOFOLLOW from its parent's descriptor, as
operators/fs/job_root.py opens a job root's, so a name swapped for a link mid-walk is skipped, never followed out.

For a tenant's tree (a job root measured against its disk cap) the walk is the tenant's to make expensive: it
holds one directory descriptor (and one listing) per level, so it stops descending MAX_DEPTH levels down and says
so (`too_deep`); the caller decides what an unmeasurable tree means. No Airflow import.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from operators.fs.job_root import JobRoot, UnsafePathError

MAX_DEPTH = 128
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_FOLLOWED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES)  # gone, swapped for a link, or closed to us


def allocated_bytes(st: os.stat_result) -> int:
    """What a file takes on its disk: its allocated blocks (512 bytes each, whatever the file system's block)."""
    return st.st_blocks * 512


@dataclass(frozen=True)
class TreeUsage:
    bytes: int  # allocated, each inode once
    entries: int  # names seen (files, directories, links, anything)
    files: int  # regular files among them
    too_deep: bool = False  # directories below MAX_DEPTH levels were not measured


def tree_usage(root: str, max_depth: int = MAX_DEPTH, *, within: str | None = None) -> TreeUsage:
    """The allocated bytes below `root`: a trusted path (reached through whatever links it has, nothing below it is),
    or, with `within` (the job root `root` lies in), a tenant's directory, reached with no link at any component
    between the two. FileNotFoundError when `root` is not there; UnsafePathError when it is not a directory (or a
    link below `within`)."""
    if within is not None:
        tree = JobRoot(within)
        with tree.directory(tree.relative(root)) as top:
            return _measure(top, max_depth)
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError:
        raise UnsafePathError(f"{root} is not a directory") from None
    try:
        return _measure(top, max_depth)
    finally:
        os.close(top)


def _measure(top: int, max_depth: int) -> TreeUsage:
    counter = _Counter(max_depth)
    counter.add(os.fstat(top))
    counter.walk(top, 1)
    return TreeUsage(counter.bytes, counter.entries, counter.files, counter.too_deep)


class _Counter:
    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.bytes = self.entries = self.files = 0
        self.too_deep = False
        self._inodes: set[tuple[int, int]] = set()

    def add(self, st: os.stat_result) -> None:
        self.entries += 1
        self.files += stat.S_ISREG(st.st_mode)
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):  # a directory's link count is its subdirectories
            inode = (st.st_dev, st.st_ino)
            if inode in self._inodes:
                return
            self._inodes.add(inode)
        self.bytes += allocated_bytes(st)

    def walk(self, dir_fd: int, depth: int) -> None:
        with os.scandir(dir_fd) as it:  # lazily: a directory of millions of names is never held as a list
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                self.add(st)
                if not stat.S_ISDIR(st.st_mode):
                    continue
                if depth >= self.max_depth:
                    self.too_deep = True
                    continue
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError as err:
                    if err.errno in _NOT_FOLLOWED:
                        continue
                    raise
                try:
                    self.walk(child, depth + 1)
                finally:
                    os.close(child)

"""Disk space of the workspace: check before writing what we know the size of, one line when a disk fills anyway.

Two places write a lot into the workspace: the prefetch of a channel into the shared cache (its size is known from
the listing before the first byte arrives) and the packing of model.tar.gz / output.tar.gz into the job root (about
the size of the directory packed: model weights barely compress). Both check the free space first and fail before
writing with the figures; when the disk fills anyway (another job wrote meanwhile, or the estimate was short), the
ENOSPC / EDQUOT of whichever write hit it becomes a `DiskFullError` saying what filled up, where, how much was needed
and is free, and what to do. Neither leaves anything half-visible: cache entries are renamed into place only when
complete, archives only when packed, uploads complete only when the whole archive was read (see operators/cache/data_cache.py,
safe_tar.pack_directory, storage/botocore/stream.py, storage/obstore/uploads.py), so the next attempt, once space is
freed, starts from what was complete.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from operators.fs.usage import tree_usage
from operators.storage.errors import DISK_FULL_ERRNOS, DiskFullError

# A file costs its blocks plus the directory entry and inode; 4 KiB covers the metadata a file adds on ext4/xfs/tmpfs.
PER_FILE_OVERHEAD = 4096
# Manifest, object list, users and last_used files of a cache entry, the directories: a fixed allowance.
ENTRY_OVERHEAD = 64 * 1024
ENTRY_FILES = 8


def _existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def free_space(path: str) -> tuple[int, int | None]:
    """(bytes, inodes) an unprivileged writer can still use on the file system holding `path` (or its nearest
    existing parent); inodes is None where the file system does not count them (btrfs, some network mounts)."""
    st = os.statvfs(_existing(path))
    return st.f_bavail * st.f_frsize, (st.f_favail if st.f_files else None)


def block_size(path: str) -> int:
    return os.statvfs(_existing(path)).f_frsize or 4096


def space_for_files(sizes: Iterable[int], block: int) -> tuple[int, int]:
    """(bytes, files) that files of these sizes take on a file system with this block size."""
    total = count = 0
    for size in sizes:
        total += -(-int(size) // block) * block + PER_FILE_OVERHEAD
        count += 1
    return total, count


def human(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"  # pragma: no cover


def is_disk_full(err: BaseException | None) -> bool:
    """True when `err`, or an exception it was raised from or while handling, is ENOSPC/EDQUOT."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, DiskFullError) or (isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS):
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full_error(what: str, path: str, needed: int | None, todo: str, *, inodes: int | None = None) -> DiskFullError:
    """The one line: what filled up, which path, needed vs free, what to do."""
    free, free_inodes = free_space(path)
    need = f"needs {human(needed)}" if needed is not None else "did not fit"
    if inodes is not None and free_inodes is not None and inodes > free_inodes:
        need += f" and {inodes} files (only {free_inodes} inodes left)"
    return DiskFullError(
        f"disk full: {what} {need} in {path}, {human(free)} free on that file system; {todo}",
        path=path, needed=needed, free=free,
    )


def fits(path: str, needed: int, inodes: int = 0) -> bool:
    free, free_inodes = free_space(path)
    return needed <= free and (free_inodes is None or inodes <= free_inodes)


def check_free(what: str, path: str, needed: int, todo: str, *, inodes: int = 0) -> None:
    """Raise the DiskFullError before writing when `needed` bytes (or `inodes` files) do not fit at `path`."""
    if not fits(path, needed, inodes):
        raise disk_full_error(what, path, needed, todo, inodes=inodes or None)




# -- the two writers -----------------------------------------------------------------------------------------------

CACHE_TODO = (
    "free space there (old job roots: [training] retention_days), lower [training] cache_max_bytes or move "
    "[training] workspace to a larger disk, then retry the task (complete cache entries are reused; nothing of "
    "this one was kept)"
)
PACK_TODO = (
    "free space there (old job roots: [training] retention_days; unused cache entries) or move [training] "
    "workspace to a larger disk, then clear upload_artifacts (the trained model is kept in the job root; nothing "
    "was published)"
)


def entry_space(sizes: Iterable[int], cache_dir: str) -> tuple[int, int]:
    """(bytes, files) a cache entry of objects of these sizes takes in `cache_dir`, its manifest included."""
    needed, files = space_for_files(sizes, block_size(cache_dir))
    return needed + ENTRY_OVERHEAD, files + ENTRY_FILES


def cache_full(uri: str, cache_dir: str, needed: int, files: int) -> DiskFullError:
    """`needed` and `files` as entry_space gave them."""
    return disk_full_error(f"the data cache: prefetching {uri} ({files - ENTRY_FILES} objects)", cache_dir, needed,
                           CACHE_TODO, inodes=files)


def tree_space(directory: str, target: str, within: str | None = None) -> tuple[int, int]:
    """(bytes, files) an archive of `directory` may take next to `target`: the blocks its files hold (weights barely
    compress), a file linked under several names counted once (the archive stores it once), tar headers, and the
    blocks of the file system `target` is on. No link is followed (packing follows none: operators/fs/usage.py);
    `within`: the job root `directory` lies in (then no component between the two may be a link either)."""
    try:
        usage = tree_usage(directory, within=within)
    except OSError:  # not there (packs nothing) or not a directory: packing says what is wrong
        return 0, 0
    needed, _ = space_for_files([usage.bytes + 1024 * usage.entries + 10240], block_size(target))
    return needed, usage.files


def check_pack_space(src_dir: str, archive_path: str, within: str | None = None) -> None:
    needed, files = tree_space(src_dir, archive_path, within)
    check_free(f"packing {os.path.basename(archive_path)} ({files} files of {src_dir})", os.path.dirname(archive_path),
               needed, PACK_TODO)


def pack_full(src_dir: str, archive_path: str) -> DiskFullError:
    needed, files = tree_space(src_dir, archive_path)
    return disk_full_error(f"packing {os.path.basename(archive_path)} ({files} files of {src_dir})",
                           os.path.dirname(archive_path), needed, PACK_TODO)


__all__ = [
    "CACHE_TODO",
    "DiskFullError",
    "PACK_TODO",
    "block_size",
    "cache_full",
    "check_pack_space",
    "entry_space",
    "fits",
    "pack_full",
    "tree_space",
    "check_free",
    "disk_full_error",
    "free_space",
    "human",
    "is_disk_full",
    "space_for_files",
]

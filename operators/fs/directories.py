"""Atomic directory replacement and removal of read-only trees (code trees, cache entries, job roots)."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat


def _rename_exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def remove_tree(path: str) -> None:
    """rmtree that also removes read-only trees (cache entries are made read-only on purpose)."""

    def make_writable_and_retry(func, failed_path, exc_info):
        if isinstance(exc_info[1], FileNotFoundError):
            return  # removed concurrently (another sweep): that is the goal anyway
        parent = os.path.dirname(failed_path)
        for target in (parent, failed_path):
            try:
                mode = os.lstat(target).st_mode
                if stat.S_ISDIR(mode):
                    os.chmod(target, mode | stat.S_IRWXU)
            except OSError:
                pass
        try:
            func(failed_path)
        except FileNotFoundError:
            pass

    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            shutil.rmtree(path, onerror=make_writable_and_retry)
    except FileNotFoundError:
        pass


def replace_directory(new_dir: str, dest: str) -> None:
    """Put `new_dir` at `dest` atomically, replacing whatever is there (directory, symlink or file).

    `new_dir` must be on the same file system as `dest` (create it in the same parent). Readers see either
    the old or the new tree, never a mix and never nothing (RENAME_EXCHANGE; elsewhere a brief gap).
    """
    if not os.path.lexists(dest):
        try:
            os.rename(new_dir, dest)
            return
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise
    if _rename_exchange(new_dir, dest):
        remove_tree(new_dir)  # now holds the previous content
        return
    aside = f"{dest}.old-{os.urandom(4).hex()}"
    os.rename(dest, aside)
    os.rename(new_dir, dest)
    remove_tree(aside)

"""A job root, read and written as untrusted input: the only way the worker, the triggerer and the view touch
anything under one.

The path of the job root itself is trusted (the worker built it from airflow.cfg); everything below it was written
by the tenant's code. So:
- every component below the root is opened with O_NOFOLLOW from its parent's descriptor: a symbolic link anywhere
  on the way is refused (`UnsafePathError`), never followed out of the root, and a name swapped for a link between
  a check and a use is refused too (there is no check apart from the use);
- a file is read only when fstat of the descriptor already opened says it is a regular file (FIFOs are opened
  O_NONBLOCK, so one cannot hang the reader); reads are capped;
- a file is written under a fresh unique name created with O_EXCL beside the target, then renamed over the target:
  the rename replaces a link at that name instead of writing through it;
- a walk yields only regular files and directories, and logs one warning per skipped entry, naming it.
Values read here are the caller's to validate; `finite_number` and `bounded_int` are the checks they share.
No Airflow import (the SDK's local mode writes job roots through it too).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from typing import Any, Iterator

log = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
DEFAULT_READ_LIMIT = 16 * 1024 * 1024  # the platform's own small files (metrics.json, markers, configs)


class UnsafePathError(OSError):
    """A path under a job root is a link, or not the kind of file expected there; the message names it."""


def describe(st: os.stat_result) -> str:
    """What a non-regular entry is, in words for a warning."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file"


def split_relative(rel: str) -> list[str]:
    """`rel`'s components; refuses absolute paths and `..` (a caller's bug, not the tenant's doing)."""
    if os.path.isabs(rel):
        raise ValueError(f"{rel!r} is not a path below a job root")
    parts = [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{rel!r} is not a path below a job root")
    return parts


def _join(parts: list[str]) -> str:
    return "/".join(parts) or "."


@dataclass(frozen=True)
class Entry:
    """A regular file or directory found by `JobRoot.walk`: `rel` is relative to the walked directory; `dir_fd` (open
    only while the walk is at this entry) and `name` locate it; `stat` is its lstat."""

    rel: str
    is_dir: bool
    dir_fd: int
    name: str
    stat: os.stat_result


class JobRoot:
    """One job root. Relative paths use `/`; each call opens what it needs from the root and closes it again."""

    def __init__(self, root: str | os.PathLike):
        self.root = os.path.abspath(os.fspath(root))
        self._warned: set[str] = set()  # one warning per skipped entry, however often it is walked (checkpoint sync)

    def __repr__(self) -> str:
        return f"JobRoot({self.root!r})"

    def relative(self, path: str | os.PathLike) -> str:
        """An absolute path below the root -> the relative path; ValueError for a path outside it."""
        rel = os.path.relpath(os.path.abspath(os.fspath(path)), self.root)
        if rel == ".":
            return ""
        split_relative(rel)
        return rel

    def _unsafe(self, parent_fd: int, name: str, rel: str, expected: str) -> UnsafePathError:
        try:
            what = describe(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
        except OSError:
            what = "gone"
        return UnsafePathError(errno.ELOOP, f"{rel} in job root {self.root} is {what}, not {expected}: not followed")

    # -- directories --------------------------------------------------------------------------------------------

    def _open_dir(self, parts: list[str], create: bool = False) -> int:
        fd = os.open(self.root, _ROOT_FLAGS)  # the root's own path is trusted (an admin may have linked it)
        try:
            for i, name in enumerate(parts):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                    try:
                        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except NotADirectoryError:
                        raise self._unsafe(fd, name, _join(parts[: i + 1]), "a directory") from None
                except NotADirectoryError:  # O_DIRECTORY|O_NOFOLLOW on a link or a file
                    raise self._unsafe(fd, name, _join(parts[: i + 1]), "a directory") from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def directory(self, rel: str = "", *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory `rel` (created as real directories where missing, with `create`)."""
        fd = self._open_dir(split_relative(rel), create)
        try:
            yield fd
        finally:
            os.close(fd)

    def ensure_dir(self, rel: str) -> None:
        """`rel` exists as a directory, every component a real one; UnsafePathError if a link is in the way."""
        with self.directory(rel, create=True):
            pass

    def is_dir(self, rel: str) -> bool:
        try:
            with self.directory(rel):
                return True
        except OSError:
            return False

    def has_entries(self, rel: str) -> bool:
        """Whether the directory `rel` (reached without links) holds anything at all; a link on the way is skipped
        with a warning naming it."""
        try:
            with self.directory(rel) as fd, os.scandir(fd) as it:
                return next(it, None) is not None
        except UnsafePathError as err:
            log.warning("Skipped %s", err)
            return False
        except OSError:
            return False

    # -- reading ------------------------------------------------------------------------------------------------

    def open_at(self, dir_fd: int, name: str, rel: str) -> tuple[int, os.stat_result]:
        """Open `name` in `dir_fd` for reading: a regular file reached without a link, else UnsafePathError."""
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise self._unsafe(dir_fd, name, rel, "a regular file") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(errno.EINVAL, f"{rel} in job root {self.root} is {describe(st)}, not a "
                                                    f"regular file: not read")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def open_file(self, rel: str) -> tuple[int, os.stat_result]:
        """A descriptor (the caller closes it) of the regular file `rel` and its fstat."""
        parts = split_relative(rel)
        if not parts:
            raise ValueError("a file name below the job root is needed")
        with self.directory(_join(parts[:-1])) as parent:
            return self.open_at(parent, parts[-1], _join(parts))

    @contextlib.contextmanager
    def opened(self, rel: str) -> Iterator[tuple[Any, os.stat_result]]:
        """The regular file `rel`, as a binary file object, and its fstat."""
        fd, st = self.open_file(rel)
        with os.fdopen(fd, "rb") as handle:
            yield handle, st

    @contextlib.contextmanager
    def pinned_path(self, rel: str) -> Iterator[tuple[str, os.stat_result]]:
        """A path that names the regular file `rel` as opened now, for APIs that take paths (uploads): a link swapped
        in later is not what it names. (/proc/self/fd/N re-opens the very file behind descriptor N.)"""
        fd, st = self.open_file(rel)
        try:
            yield f"/proc/self/fd/{fd}", st
        finally:
            os.close(fd)

    def stat(self, rel: str) -> os.stat_result | None:
        """The lstat of `rel` if it is a regular file reached without links, else None."""
        try:
            fd, st = self.open_file(rel)
        except (OSError, ValueError):
            return None
        os.close(fd)
        return st

    def is_file(self, rel: str) -> bool:
        return self.stat(rel) is not None

    def read_bytes(self, rel: str, limit: int = DEFAULT_READ_LIMIT, *, tail: bool = False) -> bytes:
        """At most `limit` bytes of the regular file `rel`: its first ones, or its last ones with `tail`."""
        with self.opened(rel) as (handle, st):
            if tail and st.st_size > limit:
                handle.seek(st.st_size - limit)
            return handle.read(limit)

    def read_text(self, rel: str, limit: int = DEFAULT_READ_LIMIT, *, tail: bool = False) -> str:
        return self.read_bytes(rel, limit, tail=tail).decode("utf-8", errors="replace")

    def read_json(self, rel: str, limit: int = DEFAULT_READ_LIMIT) -> Any:
        """The JSON document in `rel`; ValueError if it is not JSON, is cut by `limit`, or holds NaN/Infinity."""
        with self.opened(rel) as (handle, _st):
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{rel} in job root {self.root} is larger than {limit} bytes")
        return loads_strict(data)

    # -- writing ------------------------------------------------------------------------------------------------

    def write_bytes(self, rel: str, data: bytes, mode: int = 0o644) -> None:
        """Replace `rel` with `data` atomically: a reader sees the old file or the whole new one, and whatever was at
        that name (a link, a FIFO, a directory) is replaced, never written through. Parents are created."""
        parts = split_relative(rel)
        if not parts:
            raise ValueError("a file name below the job root is needed")
        name = parts[-1]
        with self.directory(_join(parts[:-1]), create=True) as parent:
            partial = f".{name}.{secrets.token_hex(8)}.partial"
            fd = os.open(partial, _NEW_FILE_FLAGS, mode, dir_fd=parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    os.fchmod(out.fileno(), mode)  # the umask would narrow it
                try:
                    os.rename(partial, name, src_dir_fd=parent, dst_dir_fd=parent)
                except OSError as err:
                    if err.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    # A directory where the platform writes a file: the name is the platform's, the directory goes.
                    log.warning("Replaced the directory %s in job root %s with the platform's file", _join(parts),
                                self.root)
                    shutil.rmtree(name, dir_fd=parent)
                    os.rename(partial, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(partial, dir_fd=parent)
                raise

    def write_text(self, rel: str, text: str, mode: int = 0o644) -> None:
        self.write_bytes(rel, text.encode("utf-8"), mode)

    def write_json(self, rel: str, document: Any, *, indent: int | None = 2) -> None:
        self.write_text(rel, json.dumps(document, indent=indent, allow_nan=False) + "\n")

    def remove(self, rel: str) -> bool:
        """Remove whatever is at `rel` (a file, a link itself, a directory tree without following anything);
        False if nothing was there or a link is on the way to it."""
        parts = split_relative(rel)
        if not parts:
            raise ValueError("refusing to remove the job root itself")
        try:
            with self.directory(_join(parts[:-1])) as parent:
                try:
                    st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    return False
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(parts[-1], dir_fd=parent)
                else:
                    os.unlink(parts[-1], dir_fd=parent)
                return True
        except FileNotFoundError:
            return False
        except UnsafePathError as err:
            log.warning("%s", err)
            return False

    # -- walking ------------------------------------------------------------------------------------------------

    def walk(self, rel: str = "") -> Iterator[Entry]:
        """Every directory and regular file below `rel`, depth first, sorted by name (a directory before what it
        holds). Links, FIFOs, sockets and devices are skipped with a warning each; no link is followed."""
        base = split_relative(rel)
        with self.directory(rel) as top:
            yield from self._walk(top, "", base)

    def _walk(self, dir_fd: int, prefix: str, base: list[str]) -> Iterator[Entry]:
        with os.scandir(dir_fd) as it:
            names = sorted(entry.name for entry in it)
        for name in names:
            rel = prefix + name
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield Entry(rel, False, dir_fd, name, st)
            elif stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                except NotADirectoryError:  # swapped for a link since the lstat
                    self.warn_skipped(_join(base + [rel]), "a symbolic link")
                    continue
                try:
                    yield Entry(rel, True, dir_fd, name, st)
                    yield from self._walk(child, rel + "/", base)
                finally:
                    os.close(child)
            else:
                self.warn_skipped(_join(base + [rel]), describe(st))

    def warn_skipped(self, rel: str, what: str) -> None:
        if rel in self._warned:
            return
        self._warned.add(rel)
        log.warning("Skipped %s in job root %s: it is %s; only regular files and directories are read or published",
                    rel, self.root, what)

    def give_to(self, uid: int, gid: int | None) -> int:
        """Make every entry of the job root uid:gid's (gid None: groups unchanged) (links themselves, never their targets), so the job's own user
        can write it; returns how many entries changed hands (entries already theirs are skipped: a retry is cheap).
        os.fwalk works from directory descriptors and does not descend into links, so a name swapped for a link
        during the walk is changed itself, never what it points to."""
        changed = 0
        if not os.path.isdir(self.root):
            return 0  # nothing staged yet: nothing to give
        for top, dirs, files, dir_fd in os.fwalk(self.root, follow_symlinks=False):
            for name in [".", *dirs, *files]:
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                        # A hard link's inode is also a file elsewhere, maybe outside the root: never given away.
                        log.warning("Kept %s in job root %s from the job's user: it has other hard links",
                                    os.path.relpath(os.path.join(top, name), self.root), self.root)
                        continue
                    if st.st_uid != uid or (gid is not None and st.st_gid != gid):
                        os.chown(name, uid, -1 if gid is None else gid, dir_fd=dir_fd, follow_symlinks=False)
                        changed += 1
                except FileNotFoundError:
                    continue
        return changed

    def remove_links(self, rel: str) -> int:
        """Remove every link and special file below the directory `rel` (a link at `rel` itself too), each with a
        warning; returns how many. For directories the platform is about to write into (restored checkpoints)."""
        parts = split_relative(rel)
        removed = 0
        if parts and not self.is_dir(rel):
            try:
                with self.directory(_join(parts[:-1])) as parent:
                    st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        log.warning("Removed %s from job root %s: it was %s where a directory belongs", rel,
                                    self.root, describe(st))
                        os.unlink(parts[-1], dir_fd=parent)
                        return 1
            except FileNotFoundError:
                return 0
        with self.directory(rel) as top:
            removed += self._remove_links(top, parts)
        return removed

    def _remove_links(self, dir_fd: int, where: list[str]) -> int:
        removed = 0
        with os.scandir(dir_fd) as it:
            names = sorted(entry.name for entry in it)
        for name in names:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                except NotADirectoryError:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                else:
                    try:
                        removed += self._remove_links(child, where + [name])
                    finally:
                        os.close(child)
                    continue
            if not stat.S_ISREG(st.st_mode):
                log.warning("Removed %s from job root %s: it was %s", _join(where + [name]), self.root, describe(st))
                os.unlink(name, dir_fd=dir_fd)
                removed += 1
        return removed


# -- values read from a job root ----------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def loads_strict(data: bytes | str) -> Any:
    """json.loads without NaN / Infinity (Python's json accepts them; nothing downstream should)."""
    return json.loads(data, parse_constant=_refuse_constant)


def finite_number(value: Any, field: str, *, low: float | None = None, high: float | None = None) -> float:
    """`value` as a finite float within [low, high]; ValueError naming `field` otherwise (booleans are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field}: expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{field}: {value} is out of range") from None
    if not math.isfinite(number):
        raise ValueError(f"{field}: {number} is not a finite number")
    if (low is not None and number < low) or (high is not None and number > high):
        raise ValueError(f"{field}: {number} is outside [{low}, {high}]")
    return number


def bounded_int(value: Any, field: str, *, low: int = 0, high: int = 2**53) -> int:
    """`value` as an int within [low, high] (an integral float is accepted); ValueError naming `field` otherwise."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{field}: {value} is outside [{low}, {high}]")
    return value


__all__ = [
    "DEFAULT_READ_LIMIT",
    "Entry",
    "JobRoot",
    "UnsafePathError",
    "bounded_int",
    "describe",
    "finite_number",
    "loads_strict",
    "split_relative",
]

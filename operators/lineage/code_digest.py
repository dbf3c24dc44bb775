"""The digest of a staged code directory: what `code.digest` in a run's lineage names, and what a reproduction checks
it stages again.

sha256 over one line per entry, entries sorted by relative path (`/`-separated, as Python sorts strings):
    d <path>                          a directory (so an empty one counts)
    f <path> <x|-> <sha256 of bytes>  a regular file, with its owner-executable bit (a .sh entry point needs it)
where <path> is JSON-encoded (a newline in a name cannot forge a second line). Times, owners and the other mode bits
are left out: staging the same code twice gives the same digest on any worker.

The tree is walked through operators/fs (JobRoot): no link is followed, only regular files are read, each from the
descriptor opened without following a link. Staged code holds nothing else (safe_extract and the downloads write
regular files and directories only); anything else found there (the tenant's code runs in that directory) is skipped
with a warning naming it, and is no part of the digest.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from operators.fs.job_root import JobRoot

DIGEST_PREFIX = "sha256:"
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class CodeDigest:
    digest: str  # "sha256:<hex>"
    files: int
    bytes: int


def _file_sha256(tree: JobRoot, dir_fd: int, name: str, rel: str) -> str:
    fd, _st = tree.open_at(dir_fd, name, rel)
    sha = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:  # hashlib.file_digest is 3.11+; the project supports 3.10
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def code_digest(code_dir: str | os.PathLike) -> CodeDigest:
    """The digest of the tree at `code_dir` (see the module doc); OSError when it cannot be read."""
    tree = JobRoot(code_dir)
    lines: list[tuple[str, str]] = []
    files = size = 0
    for entry in tree.walk():
        path = json.dumps(entry.rel, ensure_ascii=False)
        if entry.is_dir:
            lines.append((entry.rel, f"d {path}\n"))
            continue
        sha = _file_sha256(tree, entry.dir_fd, entry.name, entry.rel)
        executable = "x" if entry.stat.st_mode & 0o100 else "-"
        lines.append((entry.rel, f"f {path} {executable} {sha}\n"))
        files += 1
        size += entry.stat.st_size
    digest = hashlib.sha256()
    for _rel, line in sorted(lines):
        digest.update(line.encode("utf-8", "surrogateescape"))
    return CodeDigest(DIGEST_PREFIX + digest.hexdigest(), files, size)


__all__ = ["CodeDigest", "DIGEST_PREFIX", "code_digest"]

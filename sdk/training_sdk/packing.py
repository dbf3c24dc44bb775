"""Pack a local source_dir into a .tar.gz, leaving out what an exclude list names (.gitignore syntax).

The exclude list is `.trainingignore` in source_dir, or, when there is none, its `.gitignore`; on top of either, a few
things that are never training code (.git/, __pycache__/, *.pyc, .venv/, .ipynb_checkpoints/, .DS_Store).
Supported syntax (gitignore's): blank lines and `#` comments, `!` re-includes, a trailing `/` matches directories
only, a `/` at the start or in the middle anchors the pattern at source_dir, `*` and `?` stay within one path
segment, `**` spans segments, `[...]` classes. As in git, a file inside an excluded directory cannot be re-included.

The archive is deterministic (sorted entries, fixed owner and mtime), so the same code gives the same sha256 and is
uploaded once. Symbolic links to files inside source_dir are stored as the file they point to; other links are left
out with a warning (the platform's safe extraction refuses links).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILES = (".trainingignore", ".gitignore")
ALWAYS_EXCLUDED = (".git/", "__pycache__/", "*.pyc", ".venv/", ".ipynb_checkpoints/", ".DS_Store")
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # code, not data: the staging upload's limit (plugins/training_sdk_api.py)


def _translate(pattern: str) -> str:
    """A gitignore glob (without leading/trailing slash handling) as a regex over a relative POSIX path."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1:j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern
    negated: bool
    dir_only: bool


class IgnoreRules:
    """gitignore-style rules; `excluded(rel_path, is_dir)` applies them in order (the last match wins)."""

    def __init__(self, lines=()):
        self.rules: list[_Rule] = []
        for line in lines:
            self.add(line)

    def add(self, line: str) -> None:
        line = line.rstrip("\n")
        if not line.endswith("\\ "):
            line = line.rstrip()
        if not line or line.startswith("#"):
            return
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            return
        anchored = "/" in line
        line = line.lstrip("/")
        body = _translate(line)
        regex = ("^" if anchored else "^(?:.*/)?") + body + "$"
        self.rules.append(_Rule(re.compile(regex, re.DOTALL), negated, dir_only))

    def excluded(self, rel_path: str, is_dir: bool) -> bool:
        result = False
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel_path):
                result = not rule.negated
        return result

    @classmethod
    def for_source_dir(cls, source_dir: str | os.PathLike) -> tuple[IgnoreRules, str | None]:
        """The rules of a source dir and the name of the exclude file they came from (None: defaults only)."""
        rules = cls(ALWAYS_EXCLUDED)
        for name in IGNORE_FILES:
            path = Path(source_dir, name)
            if path.is_file():
                for line in path.read_text(errors="replace").splitlines():
                    rules.add(line)
                return rules, name
        return rules, None


def list_files(source_dir: str | os.PathLike) -> list[tuple[str, Path]]:
    """(relative POSIX path, absolute path) of every file to pack, sorted; excluded directories are not entered."""
    root = Path(source_dir).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"source_dir {source_dir} is not a directory")
    rules, _ = IgnoreRules.for_source_dir(root)
    files: list[tuple[str, Path]] = []
    for current, dirs, names in os.walk(root):
        rel_dir = Path(current).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        kept = []
        for d in sorted(dirs):
            full = Path(current, d)
            if full.is_symlink():
                print(f"training_sdk: leaving out {prefix}{d}: a link to a directory", file=sys.stderr)
            elif not rules.excluded(prefix + d, True):
                kept.append(d)
        dirs[:] = kept
        for name in sorted(names):
            rel = prefix + name
            full = Path(current, name)
            if rules.excluded(rel, False):
                continue
            if full.is_symlink():
                target = full.resolve()
                if not (target.is_file() and target.is_relative_to(root)):
                    print(f"training_sdk: leaving out {rel}: a link that points outside source_dir or nowhere",
                          file=sys.stderr)
                    continue
            elif not full.is_file():
                continue  # sockets, fifos
            files.append((rel, full))
    return sorted(files)


@dataclass(frozen=True)
class PackedCode:
    data: bytes
    sha256: str
    files: int
    bytes: int  # uncompressed


def pack_source_dir(source_dir: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> PackedCode:
    """The source dir as deterministic .tar.gz bytes; refuses (before packing) code larger than `max_bytes`."""
    files = list_files(source_dir)
    if not files:
        raise ValueError(f"source_dir {source_dir} has no files to upload (all excluded?); check .trainingignore")
    total = sum(path.stat().st_size for _, path in files)
    if total > max_bytes:
        biggest = sorted(files, key=lambda f: f[1].stat().st_size, reverse=True)[:3]
        names = ", ".join(f"{rel} ({path.stat().st_size // 1024 // 1024} MiB)" for rel, path in biggest)
        raise ValueError(f"source_dir {source_dir} holds {total // 1024 // 1024} MiB of files, over the "
                         f"{max_bytes // 1024 // 1024} MiB limit for code (largest: {names}); list data and models "
                         f"in .trainingignore and pass data as inputs")
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        seen_dirs: set[str] = set()
        for rel, path in files:
            parts = rel.split("/")[:-1]
            for k in range(1, len(parts) + 1):
                d = "/".join(parts[:k])
                if d not in seen_dirs:
                    seen_dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
            st = path.stat()
            info = tarfile.TarInfo(rel)
            info.size = st.st_size
            info.mode = 0o755 if st.st_mode & 0o111 else 0o644
            info.mtime = 0
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    data = buffer.getvalue()
    return PackedCode(data, hashlib.sha256(data).hexdigest(), len(files), total)

"""Packing a source dir: gitignore-style excludes, a deterministic archive, the size limit, links."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from training_sdk.packing import IgnoreRules, list_files, pack_source_dir


@pytest.mark.parametrize("pattern, path, is_dir, excluded", [
    ("*.csv", "data/a.csv", False, True),            # no slash: matches at any depth
    ("/data", "data", True, True),                   # leading slash: only at the root
    ("/data", "src/data", True, False),
    ("logs/", "logs", True, True),                   # trailing slash: directories only
    ("logs/", "logs", False, False),
    ("a/*.py", "a/b.py", False, True),               # a slash in the middle anchors too
    ("a/*.py", "x/a/b.py", False, False),
    ("a/*.py", "a/sub/b.py", False, False),          # * stays within a segment
    ("a/**/b.py", "a/x/y/b.py", False, True),        # ** spans segments
    ("**/cache", "deep/er/cache", True, True),
    ("model?.bin", "model1.bin", False, True),
    ("[abc].txt", "b.txt", False, True),
    ("[!abc].txt", "b.txt", False, False),
    ("# comment", "# comment", False, False),
])
def test_gitignore_patterns(pattern, path, is_dir, excluded):
    assert IgnoreRules([pattern]).excluded(path, is_dir) is excluded


def test_negation_reincludes_and_the_last_match_wins():
    rules = IgnoreRules(["*.json", "!config.json"])
    assert rules.excluded("a.json", False) and not rules.excluded("config.json", False)
    assert IgnoreRules(["!keep.txt", "*.txt"]).excluded("keep.txt", False)


def tree(root, files):
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_trainingignore_wins_over_gitignore_and_defaults_always_apply(tmp_path):
    tree(tmp_path, {"train.py": b"x", "utils/io.py": b"y", "data/big.csv": b"z", "notes.md": b"n",
                    "__pycache__/train.cpython-311.pyc": b"c", ".git/HEAD": b"h", ".venv/bin/python": b"p",
                    ".gitignore": b"*.md\n", ".trainingignore": b"data/\n"})
    assert [rel for rel, _ in list_files(tmp_path)] == [".gitignore", ".trainingignore", "notes.md", "train.py",
                                                         "utils/io.py"]
    (tmp_path / ".trainingignore").unlink()
    assert "notes.md" not in [rel for rel, _ in list_files(tmp_path)]  # .gitignore used when there is no other
    assert "data/big.csv" in [rel for rel, _ in list_files(tmp_path)]


def test_a_file_in_an_excluded_directory_cannot_be_reincluded(tmp_path):
    tree(tmp_path, {"train.py": b"x", "data/keep.csv": b"k", ".trainingignore": b"data/\n!data/keep.csv\n"})
    assert "data/keep.csv" not in [rel for rel, _ in list_files(tmp_path)]


def test_archive_is_deterministic_and_holds_the_files_with_their_modes(tmp_path):
    tree(tmp_path, {"train.py": b"print(1)", "run.sh": b"#!/bin/sh\n", "pkg/__init__.py": b""})
    os.chmod(tmp_path / "run.sh", 0o755)
    first = pack_source_dir(tmp_path)
    os.utime(tmp_path / "train.py", (1, 1))  # a different mtime changes nothing
    second = pack_source_dir(tmp_path)
    assert first.sha256 == second.sha256 and first.data == second.data
    with tarfile.open(fileobj=io.BytesIO(first.data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["pkg", "pkg/__init__.py", "run.sh", "train.py"]
        assert members["run.sh"].mode == 0o755 and members["train.py"].mode == 0o644
        assert tar.extractfile("train.py").read() == b"print(1)"
    assert (first.files, first.bytes) == (3, 18)


def test_code_over_the_limit_is_refused_naming_the_biggest_files(tmp_path):
    tree(tmp_path, {"train.py": b"x", "weights.bin": b"w" * (3 * 1024 * 1024)})
    with pytest.raises(ValueError, match=r"over the 2 MiB limit.*weights.bin \(3 MiB\).*\.trainingignore"):
        pack_source_dir(tmp_path, max_bytes=2 * 1024 * 1024)


def test_links_inside_are_stored_as_files_links_outside_are_left_out(tmp_path, capsys):
    src = tmp_path / "src"
    tree(src, {"train.py": b"x", "real/config.yaml": b"c"})
    (tmp_path / "secret.txt").write_text("s")
    (src / "config.yaml").symlink_to(src / "real" / "config.yaml")
    (src / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (src / "alias").symlink_to(src / "real", target_is_directory=True)
    with tarfile.open(fileobj=io.BytesIO(pack_source_dir(src).data)) as tar:
        names = tar.getnames()
        assert tar.getmember("config.yaml").isfile() and tar.extractfile("config.yaml").read() == b"c"
    assert "leak.txt" not in names and "alias" not in names
    assert "leak.txt: a link that points outside" in capsys.readouterr().err


def test_nothing_to_pack_is_an_error(tmp_path):
    tree(tmp_path, {"a.pyc": b"x"})
    with pytest.raises(ValueError, match="no files to upload"):
        pack_source_dir(tmp_path)

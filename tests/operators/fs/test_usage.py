"""A job root's disk use as the disk counts it: blocks, each file once, no link followed, a bounded walk."""

from __future__ import annotations

import os

import pytest

from operators.fs.job_root import UnsafePathError
from operators.fs.usage import tree_usage

MiB = 1024 * 1024


def test_blocks_are_counted_once_per_file_and_no_link_is_followed(tmp_path):
    root = tmp_path / "job"
    (root / "model").mkdir(parents=True)
    (root / "model" / "w.bin").write_bytes(os.urandom(2 * MiB))
    for i in range(15):
        os.link(root / "model" / "w.bin", root / "model" / f"link-{i}.bin")
    with open(root / "sparse.bin", "wb") as fh:
        fh.truncate(100 * 1024 * MiB)  # claims 100 GiB, holds nothing
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(os.urandom(4 * MiB))
    (root / "elsewhere").symlink_to(outside)  # not followed: what it points at is not the job's

    usage = tree_usage(str(root))
    assert 2 * MiB <= usage.bytes < 2 * MiB + 64 * 1024
    assert usage.files == 17 and usage.entries == 20 and not usage.too_deep


def test_a_tree_deeper_than_the_walk_goes_says_so(tmp_path):
    path = tmp_path / "job"
    for _ in range(6):
        path = path / "d"
    path.mkdir(parents=True)
    (path / "hidden.bin").write_bytes(os.urandom(MiB))
    assert tree_usage(str(tmp_path / "job"), max_depth=4).too_deep
    assert tree_usage(str(tmp_path / "job"), max_depth=10).bytes >= MiB


def test_a_missing_root_or_a_file_is_no_tree(tmp_path):
    with pytest.raises(FileNotFoundError):
        tree_usage(str(tmp_path / "none"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(UnsafePathError):
        tree_usage(str(tmp_path / "f"))


def test_a_tenants_directory_is_reached_through_no_link(tmp_path):
    root = tmp_path / "job"
    root.mkdir()
    (root / "model").symlink_to("/usr")  # a walk of /usr would cost the worker, and measure what is not the job's
    with pytest.raises(UnsafePathError):
        tree_usage(str(root / "model"), within=str(root))
    (root / "output").mkdir()
    assert tree_usage(str(root / "output"), within=str(root)).entries == 1

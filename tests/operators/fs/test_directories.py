"""replace_directory puts a new tree in place of a directory, a read-only tree or a symlink; remove_tree removes
read-only trees."""

from __future__ import annotations

import os
import shutil

from operators.fs.directories import remove_tree, replace_directory


def test_replace_directory_swaps_trees_and_symlinks(tmp_path):
    dest = tmp_path / "dest"
    new = tmp_path / "new"
    new.mkdir()
    (new / "v2").write_text("2")
    replace_directory(str(new), str(dest))  # dest did not exist
    assert (dest / "v2").exists() and not new.exists()

    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "v3").write_text("3")
    os.chmod(dest / "v2", 0o444)
    os.chmod(dest, 0o555)  # read-only old trees are removed too
    replace_directory(str(newer), str(dest))
    assert sorted(os.listdir(dest)) == ["v3"]
    os.symlink("dest", tmp_path / "alias")
    replace_directory(str(dest), str(tmp_path / "alias"))  # a directory replacing a symlink
    assert (tmp_path / "alias").is_dir() and not (tmp_path / "alias").is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["alias"]
    shutil.rmtree(tmp_path / "alias")


def test_remove_tree_removes_read_only_trees_files_links_and_nothing(tmp_path):
    tree = tmp_path / "entry" / "sub"
    tree.mkdir(parents=True)
    (tree / "weights.bin").write_bytes(b"w")
    for path in (tree / "weights.bin", tree, tree.parent):
        os.chmod(path, 0o555 if path.is_dir() else 0o444)  # cache entries are read-only on purpose
    remove_tree(str(tmp_path / "entry"))
    (tmp_path / "file").write_text("x")
    remove_tree(str(tmp_path / "file"))
    os.symlink(tmp_path / "missing", tmp_path / "link")
    remove_tree(str(tmp_path / "link"))  # the link goes, not what it points to
    remove_tree(str(tmp_path / "never-there"))
    assert os.listdir(tmp_path) == []

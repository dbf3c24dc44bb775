"""Each user's SDK uploads live in a directory of their own, whatever the user name holds."""

import os
import time

from operators.settings import user_dir_name
from operators.staging.sdk_uploads import used_bytes


def test_plain_names_are_kept_and_others_become_a_digest():
    assert user_dir_name("alice") == "alice" and user_dir_name("a.b@corp") == "a.b@corp"
    for odd in ("..", ".", "", "a/b", "../admin", "x" * 100, "名前"):
        name = user_dir_name(odd)
        assert name.startswith("u-") and "/" not in name and name not in (".", "..")
    assert user_dir_name("a/b") != user_dir_name("a_b")


def test_used_bytes_counts_regular_files_only(tmp_path):
    (tmp_path / "a.tar.gz").write_bytes(b"x" * 10)
    (tmp_path / "b.tar.gz").write_bytes(b"x" * 5)
    os.symlink("/etc/passwd", tmp_path / "link")
    assert used_bytes(str(tmp_path)) == 15
    assert used_bytes(str(tmp_path), besides=str(tmp_path / "a.tar.gz")) == 5
    assert used_bytes(str(tmp_path / "missing")) == 0



def test_expire_keeps_the_archives_the_caller_names_and_asks_only_once_one_expired(tmp_path):
    from operators.staging.sdk_uploads import DAY, expire

    asked = []
    named, other = ("a" * 64, "b" * 64)
    for sha, days in ((named, 10), (other, 10)):
        path = tmp_path / f"{sha}.tar.gz"
        path.write_bytes(b"code")
        os.utime(path, (time.time() - days * DAY,) * 2)
    assert expire(str(tmp_path), 30, kept=lambda: asked.append(1) or {named}) == [] and asked == []
    assert expire(str(tmp_path), 7, kept=lambda: asked.append(1) or {named}) == [f"{other}.tar.gz"]
    assert (tmp_path / f"{named}.tar.gz").exists() and asked == [1, 1]  # once per expired archive here

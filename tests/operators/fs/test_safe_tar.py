"""safe_extract refuses hostile archives (naming the member, writing nothing outside); pack_directory packs."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

import pytest

from operators.fs.safe_tar import (
    BadArchiveError,
    UnsafeArchiveError,
    pack_directory,
    safe_extract,
)


def add_file(tf: tarfile.TarFile, name: str, data: bytes = b"x", mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tf.addfile(info, io.BytesIO(data))


def add_special(tf: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    tf.addfile(info)


def make_archive(path, build) -> str:
    with tarfile.open(path, "w:gz") as tf:
        build(tf)
    return str(path)


def snapshot(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


@pytest.fixture
def arena(tmp_path):
    """work/ holds the archive and the target; outside/ is what an escape would hit."""
    (tmp_path / "work").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "target").write_text("original")
    return tmp_path


MALICIOUS = {
    "dotdot": (lambda tf: (add_file(tf, "ok.txt"), add_file(tf, "../outside/pwned")), "../outside/pwned", "'..'"),
    "nested-dotdot": (lambda tf: add_file(tf, "a/b/../../../outside/pwned"), "a/b/../../../outside/pwned", "'..'"),
    "absolute": (lambda tf: add_file(tf, "/tmp/pwned-absolute"), "/tmp/pwned-absolute", "absolute path"),
    "symlink-escape": (
        lambda tf: (add_special(tf, "link", tarfile.SYMTYPE, "../outside"), add_file(tf, "link/target", b"pwned")),
        "link",
        "symbolic link",
    ),
    "symlink-inside": (lambda tf: add_special(tf, "l", tarfile.SYMTYPE, "ok.txt"), "l", "symbolic link"),
    "hardlink-escape": (
        lambda tf: add_special(tf, "hl", tarfile.LNKTYPE, "../outside/target"),
        "hl",
        "hard link",
    ),
    "char-device": (lambda tf: add_special(tf, "dev/mem", tarfile.CHRTYPE), "dev/mem", "device file"),
    "block-device": (lambda tf: add_special(tf, "dev/sda", tarfile.BLKTYPE), "dev/sda", "device file"),
    "fifo": (lambda tf: add_special(tf, "pipe", tarfile.FIFOTYPE), "pipe", "FIFO"),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_malicious_archive_is_refused_naming_the_member_and_nothing_escapes(arena, case):
    build, member, why = MALICIOUS[case]
    archive = make_archive(arena / "work" / "code.tar.gz", build)
    before_work, before_outside = snapshot(arena / "work"), snapshot(arena / "outside")

    with pytest.raises(UnsafeArchiveError) as info:
        safe_extract(archive, str(arena / "work" / "target"))

    assert isinstance(info.value, ValueError)
    assert repr(member) in str(info.value) and why in str(info.value) and archive in str(info.value)
    assert snapshot(arena / "work") == before_work  # no target, no temp directory left behind
    assert snapshot(arena / "outside") == before_outside
    assert (arena / "outside" / "target").read_text() == "original"
    assert not os.path.exists("/tmp/pwned-absolute")


def test_too_large_archive_is_refused(arena):
    archive = make_archive(
        arena / "work" / "big.tar.gz", lambda tf: (add_file(tf, "small", b"s" * 600), add_file(tf, "huge.bin", b"h" * 600))
    )
    with pytest.raises(UnsafeArchiveError) as info:
        safe_extract(archive, str(arena / "work" / "target"), max_bytes=1000)
    assert "'huge.bin'" in str(info.value) and "1000 bytes" in str(info.value)
    assert snapshot(arena / "work") == {"big.tar.gz"}


def test_size_header_cannot_be_trusted_either(arena):
    """A member whose data exceeds the limit is stopped while it is written, not only by its header."""
    archive = make_archive(arena / "work" / "a.tar.gz", lambda tf: add_file(tf, "a.bin", b"a" * 5000))
    with pytest.raises(UnsafeArchiveError, match="'a.bin'"):
        safe_extract(archive, str(arena / "work" / "target"), max_bytes=4999)


def test_too_many_members_is_refused(arena):
    archive = make_archive(arena / "work" / "many.tar.gz", lambda tf: [add_file(tf, f"f{i}") for i in range(10)])
    with pytest.raises(UnsafeArchiveError) as info:
        safe_extract(archive, str(arena / "work" / "target"), max_members=5)
    assert "more than 5 members" in str(info.value) and "'f5'" in str(info.value)
    assert snapshot(arena / "work") == {"many.tar.gz"}


def test_corrupt_archive_is_a_bad_archive(arena):
    bad = arena / "work" / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b" + os.urandom(200))
    with pytest.raises(BadArchiveError, match="cannot read archive"):
        safe_extract(str(bad), str(arena / "work" / "target"))
    assert snapshot(arena / "work") == {"bad.tar.gz"}


def test_archive_made_by_tar_extracts_and_replaces_the_target(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('train')")
    (src / "pkg" / "__init__.py").write_text("")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o755)
    archive = tmp_path / "code.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(src), "."], check=True)  # members "./", "./train.py"
    target = tmp_path / "code"
    target.mkdir()
    (target / "stale.py").write_text("old")

    stats = safe_extract(str(archive), str(target))

    assert (stats.files, stats.bytes) == (3, len("print('train')") + len("#!/bin/sh\n"))
    assert snapshot(target) == {"train.py", "pkg", "pkg/__init__.py", "run.sh"}  # stale.py is gone
    assert os.access(target / "run.sh", os.X_OK) and not os.access(target / "train.py", os.X_OK)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["code", "code.tar.gz", "src"]


def test_pack_directory_roundtrip_is_sorted_relative_and_deterministic(tmp_path, caplog):
    src = tmp_path / "model"
    (src / "b_dir" / "nested").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "z.bin").write_bytes(os.urandom(3000))
    (src / "a.json").write_text("{}")
    (src / "b_dir" / "nested" / "w.pt").write_bytes(b"w" * 100)
    (src / "link_to_a").symlink_to("a.json")  # skipped: a link is never followed, even inside the tree
    (src / "linked_dir").symlink_to(src / "b_dir")  # skipped: would duplicate / loop

    out = tmp_path / "out" / "model.tar.gz"
    stats = pack_directory(str(src), str(out))
    with tarfile.open(out) as tf:
        names = tf.getnames()
        assert all(m.isreg() or m.isdir() for m in tf.getmembers())
    assert names == ["a.json", "b_dir", "b_dir/nested", "b_dir/nested/w.pt", "empty", "z.bin"]
    skipped = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "Skipped" in r.getMessage()]
    assert len(skipped) == 2 and "link_to_a" in skipped[0] and "linked_dir" in skipped[1]
    assert (stats.files, stats.bytes_in, stats.bytes_out) == (3, 3000 + 2 + 100, out.stat().st_size)
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.tar.gz"]  # no temp file left

    again = tmp_path / "again.tar.gz"
    pack_directory(str(src), str(again))
    assert again.read_bytes() == out.read_bytes()

    safe_extract(str(out), str(tmp_path / "unpacked"))
    assert (tmp_path / "unpacked" / "b_dir" / "nested" / "w.pt").read_bytes() == b"w" * 100
    assert (tmp_path / "unpacked" / "empty").is_dir()


def test_pack_directory_is_one_standard_gzip_member_whatever_the_thread_count(tmp_path):
    import gzip
    import random

    src = tmp_path / "model"
    src.mkdir()
    rng = random.Random(3)
    (src / "weights.bin").write_bytes(rng.randbytes(3 * 1024 * 1024 + 17))  # incompressible: stored blocks
    (src / "log.txt").write_text("step loss\n" * 300_000)  # compressible, several 1 MiB blocks
    archives = []
    for threads in (1, 3):
        out = tmp_path / f"t{threads}.tar.gz"
        pack_directory(str(src), str(out), threads=threads)
        archives.append(out.read_bytes())
    assert archives[0] == archives[1]  # block boundaries depend on the bytes, not on the threads
    data = archives[0]
    # gzip, deflate, no name, mtime 0 (bytes 8-9, XFL and OS, only inform: isal 1.9 writes them swapped)
    assert data[:8] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00"
    assert len(data) < 3 * 1024 * 1024 + 300_000  # the log compressed, the random data stored (not grown)
    with gzip.open(tmp_path / "t1.tar.gz") as fh:  # Python's own reader checks CRC-32 and length
        stream = fh.read()
    with tarfile.open(fileobj=io.BytesIO(stream)) as tf:
        assert tf.extractfile("weights.bin").read() == (src / "weights.bin").read_bytes()


def test_a_failed_pack_sends_no_trailer_to_the_sink(tmp_path, monkeypatch):
    src = tmp_path / "model"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    (src / "b.bin").write_bytes(b"b" * 10)
    from operators.fs.job_root import JobRoot

    real_open, seen = JobRoot.open_at, []

    def failing_open(self, dir_fd, name, rel):
        if name == "b.bin":
            raise OSError("disk gone")
        return real_open(self, dir_fd, name, rel)

    monkeypatch.setattr(JobRoot, "open_at", failing_open)
    with pytest.raises(OSError, match="disk gone"):
        pack_directory(str(src), str(tmp_path / "out.tar.gz"), sink=seen.append)
    sent = b"".join(seen)
    assert sent[:2] == b"\x1f\x8b" and len(sent) < 2 * 1024 * 1024 + 200  # no last block, no trailer after it
    assert not list(tmp_path.glob("out.tar.gz*")) and not list(tmp_path.glob(".out.tar.gz*"))


def test_pack_directory_into_itself_skips_the_archive(tmp_path):
    src = tmp_path / "output"
    src.mkdir()
    (src / "metrics.json").write_text("{}")
    pack_directory(str(src), str(src / "output.tar.gz"))
    pack_directory(str(src), str(src / "output.tar.gz"))  # again, with the old archive present
    with tarfile.open(src / "output.tar.gz") as tf:
        assert tf.getnames() == ["metrics.json"]


def test_pack_within_a_job_root_follows_no_link_on_the_way_to_the_directory(tmp_path, caplog):
    """model/ (or output/ of the pai layout) made a link by the tenant: the archive is empty, with a warning."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "airflow-secrets.env").write_text("JWT_SECRET=x")
    root = tmp_path / "job"
    root.mkdir()
    (root / "model").symlink_to(secrets)
    out = tmp_path / "model.tar.gz"
    stats = pack_directory(str(root / "model"), str(out), within=str(root))
    with tarfile.open(out) as tf:
        assert tf.getnames() == []
    assert stats.files == 0 and "model in job root" in caplog.text and "symbolic link" in caplog.text


def test_hard_links_in_model_pack_once_and_every_name_extracts(tmp_path):
    # Issue 47: 32 MiB plus 31 hard links of it were packed as 1.1 GB (and the archive kept in the state directory).
    MiB = 1024 * 1024
    model = tmp_path / "job" / "model"
    (model / "shards").mkdir(parents=True)
    weights = os.urandom(4 * MiB)  # incompressible: the archive's size is the content it stores
    (model / "weights.bin").write_bytes(weights)
    for i in range(31):
        os.link(model / "weights.bin", model / "shards" / f"copy-{i:02d}.bin")
    (model / "config.json").write_text("{}")

    out = tmp_path / "artifacts" / "model.tar.gz"
    stats = pack_directory(str(model), str(out), within=str(tmp_path / "job"))

    assert out.stat().st_size < 5 * MiB  # one copy (and 32 headers), not 32
    assert stats.bytes_in == len(weights) + 2 and stats.files == 33
    with tarfile.open(out) as tf:  # standard tar members: the first name holds the content, the others link to it
        links = [m for m in tf.getmembers() if m.islnk()]
        assert len(links) == 31 and {m.linkname for m in links} == {"shards/copy-00.bin"}
    # Python's and GNU tar's extraction and ours give every name its content; ours takes its space once.
    for unpack in ("ours", "tar"):
        target = tmp_path / f"unpacked-{unpack}"
        if unpack == "ours":
            safe_extract(str(out), str(target))
        else:
            target.mkdir()
            subprocess.run(["tar", "xzf", str(out), "-C", str(target)], check=True)
        names = [target / "weights.bin", *sorted((target / "shards").iterdir())]
        assert len(names) == 32 and all(p.read_bytes() == weights for p in names)
        assert len({p.stat().st_ino for p in names}) == 1


def test_a_hard_link_member_may_name_only_a_file_extracted_before_it(arena):
    build = (lambda tf: (add_special(tf, "early", tarfile.LNKTYPE, "later.txt"), add_file(tf, "later.txt")))
    archive = make_archive(arena / "work" / "links.tar.gz", build)
    with pytest.raises(UnsafeArchiveError) as info:
        safe_extract(archive, str(arena / "work" / "target"))
    assert "'early' is a hard link to 'later.txt'" in str(info.value)

    # A name given again after a link to it is a new file: writing it never changes the file linked before.
    build = (lambda tf: (add_file(tf, "a", b"first"), add_special(tf, "b", tarfile.LNKTYPE, "a"),
                         add_file(tf, "b", b"second")))
    archive = make_archive(arena / "work" / "again.tar.gz", build)
    safe_extract(archive, str(arena / "work" / "target"))
    assert (arena / "work" / "target" / "a").read_bytes() == b"first"
    assert (arena / "work" / "target" / "b").read_bytes() == b"second"

"""stage_code from a prefix, a .tar.gz object, a local directory and a local .tar.gz (real S3 server: MinIO)."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from operators.staging.code import stage_code
from operators.storage.hook import ObjectStorageHook, StorageError
from operators.fs.safe_tar import UnsafeArchiveError, pack_directory
from operators.settings import TrainingSettings


@pytest.fixture
def hook(tmp_path) -> ObjectStorageHook:
    return ObjectStorageHook(settings=TrainingSettings(workspace=str(tmp_path / "ws")))


@pytest.fixture
def code_tree(tmp_path):
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "train.py").write_text("import lib\n")
    (src / "lib" / "__init__.py").write_text("X = 1\n")
    (src / "requirements.txt").write_text("numpy\n")
    return src


def tree(root) -> dict[str, bytes]:
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            path = os.path.join(d, name)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


def job_dir_entries(job) -> list[str]:
    return sorted(os.listdir(job))


def test_stage_from_prefix_replaces_the_code_dir(tmp_path, hook, code_tree, storage_connections, object_store):
    bucket = object_store.bucket()
    for rel, data in tree(code_tree).items():
        object_store.put(bucket, f"jobs/code/{rel}", data)
    dest = tmp_path / "job" / "code"
    dest.mkdir(parents=True)
    (dest / "stale.py").write_text("from a previous attempt")

    stats = stage_code(hook, f"s3://{bucket}/jobs/code/", str(dest))

    assert tree(dest) == tree(code_tree)
    assert stats.files == 3
    assert job_dir_entries(tmp_path / "job") == ["code"]  # no staging leftovers


def test_stage_from_tar_gz_object_on_cos(tmp_path, hook, code_tree, storage_connections, object_store, cos_proxy):
    bucket = object_store.bucket()
    archive = tmp_path / "sourcedir.tar.gz"
    pack_directory(str(code_tree), str(archive))
    object_store.put(bucket, "code/sourcedir.tar.gz", archive.read_bytes())
    dest = tmp_path / "job" / "code"

    stats = stage_code(hook, f"cos://{bucket}/code/sourcedir.tar.gz", str(dest))

    assert tree(dest) == tree(code_tree)
    assert stats.bytes == archive.stat().st_size
    assert cos_proxy.object_requests()
    assert job_dir_entries(tmp_path / "job") == ["code"]


def test_stage_from_local_dir_and_local_tar_gz(tmp_path, hook, code_tree):
    dest = tmp_path / "job" / "code"
    stage_code(hook, str(code_tree), str(dest))
    assert tree(dest) == tree(code_tree)

    archive = tmp_path / "code.tgz"
    (code_tree / "extra.py").write_text("pass\n")
    pack_directory(str(code_tree), str(archive))
    stage_code(hook, f"file://{archive}", str(dest))
    assert tree(dest) == tree(code_tree)

    single = tmp_path / "solo.py"
    single.write_text("print(1)\n")
    stage_code(hook, str(single), str(dest))  # a single script becomes the only file of the code dir
    assert tree(dest) == {"solo.py": b"print(1)\n"}


def test_bad_archive_object_names_member_and_keeps_previous_code(tmp_path, hook, storage_connections, object_store):
    bucket = object_store.bucket()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("evil")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc"
        tf.addfile(info)
    object_store.put(bucket, "bad.tar.gz", buf.getvalue())
    dest = tmp_path / "job" / "code"
    dest.mkdir(parents=True)
    (dest / "train.py").write_text("previous")

    with pytest.raises(UnsafeArchiveError) as info:
        stage_code(hook, f"s3://{bucket}/bad.tar.gz", str(dest))

    assert "'evil'" in str(info.value) and f"s3://{bucket}/bad.tar.gz" in str(info.value)
    assert tree(dest) == {"train.py": b"previous"}
    assert job_dir_entries(tmp_path / "job") == ["code"]


def test_missing_source_is_one_clear_error(tmp_path, hook, storage_connections, object_store):
    bucket = object_store.bucket()
    with pytest.raises(StorageError) as info:
        stage_code(hook, f"s3://{bucket}/nope/", str(tmp_path / "job" / "code"))
    assert f"s3://{bucket}/nope/" in str(info.value) and "'aws_default'" in str(info.value)
    assert "source_dir" in str(info.value)

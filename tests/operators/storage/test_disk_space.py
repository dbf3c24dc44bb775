"""A full disk during prefetch (the shared data cache) and during packing model.tar.gz, on a real size-limited file
system (a tmpfs: tests/small_disk.py) against the real S3 server: one line with the figures, nothing half-visible
(no partial cache entry, no temp file, no object, no open multipart upload), and the next attempt, once space is
freed, completes and reuses what was complete."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

import pytest
from small_disk import small_disk  # noqa: F401  (the fixture)

from operators.storage import hook as storage_hook
from operators.cache.data_cache import DataCacheHook
from operators.storage.disk_space import DiskFullError
from operators.storage.hook import ObjectStorageHook
from operators.settings import TrainingSettings

KiB, MiB = 1024, 1024 * 1024


def new_cache(workspace: Path) -> DataCacheHook:
    settings = TrainingSettings(workspace=str(workspace), transfer_concurrency=4)
    return DataCacheHook(settings.cache_dir, ObjectStorageHook(None, settings=settings))


def leftovers(cache_dir: Path) -> list[str]:
    """Anything in the cache besides complete entries and the bookkeeping dirs."""
    return sorted(p.name for p in cache_dir.iterdir() if len(p.name) != 64 and p.name not in ("locks", "listings"))


def put_channel(object_store, bucket: str, prefix: str, count: int, size: int) -> dict[str, bytes]:
    files = {f"part-{i:03d}.bin": os.urandom(size) for i in range(count)}
    for name, data in files.items():
        object_store.put(bucket, prefix + name, data)
    return files


def read_tree(root) -> dict[str, bytes]:
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def figures(message: str) -> tuple[float, float]:
    needed, free = re.search(r"needs ([0-9.]+) MiB .* ([0-9.]+) MiB free", message).groups()
    return float(needed), float(free)


def test_a_channel_that_cannot_fit_fails_before_downloading_with_the_figures(small_disk, storage_connections,
                                                                             object_store, s3_proxy):
    disk = small_disk(16 * MiB)
    bucket = object_store.bucket()
    files = put_channel(object_store, bucket, "train/", 6, MiB)
    disk.fill(leave=3 * MiB)  # another job's files
    cache = new_cache(disk.path / "ws")

    with pytest.raises(DiskFullError) as caught:
        cache.prefetch(f"s3://{bucket}/train/", user="job-a")

    message = str(caught.value)
    assert message.startswith(f"disk full: the data cache: prefetching s3://{bucket}/train/ (6 objects) needs ")
    assert f" in {disk.path / 'ws' / 'cache'}, " in message and "retry the task" in message
    needed, free = figures(message)
    assert 6.0 <= needed < 6.5 and 2.5 < free <= 3.0
    assert "\n" not in message
    assert s3_proxy.object_requests() == []  # not one object byte was fetched
    assert leftovers(disk.path / "ws" / "cache") == [] and cache.entries() == []

    disk.free()  # space freed: the next attempt completes
    entry = new_cache(disk.path / "ws").prefetch(f"s3://{bucket}/train/", user="job-a")
    assert not entry.reused and read_tree(entry.path) == files


def test_a_disk_filling_during_the_download_leaves_no_partial_entry_and_the_retry_reuses_what_was_complete(
        small_disk, storage_connections, object_store, s3_proxy):
    disk = small_disk(24 * MiB)
    bucket = object_store.bucket()
    labels = put_channel(object_store, bucket, "labels/", 2, 256 * KiB)
    train = put_channel(object_store, bucket, "train/", 48, 128 * KiB)
    cache_dir = disk.path / "ws" / "cache"
    done = new_cache(disk.path / "ws").prefetch(f"s3://{bucket}/labels/", user="job-a")
    s3_proxy.throttle_bytes_per_s = 4 * MiB  # each 128 KiB body takes ~30 ms: the download is under way when ...
    # ... another writer takes the rest of the disk, after the up-front check passed
    disk.fill_when(lambda: any(p.name.startswith("tmp-") for p in cache_dir.iterdir()), leave=0)

    with pytest.raises(DiskFullError) as caught:
        new_cache(disk.path / "ws").prefetch(f"s3://{bucket}/train/", user="job-a")

    # The download can hit ENOSPC while the filler's fallocate is still returning: wait for it, briefly. An error
    # from the up-front check (no tmp- entry yet) never sets it, and fails here.
    assert disk.filled.wait(30)
    message = str(caught.value)
    assert message.startswith(f"disk full: the data cache: prefetching s3://{bucket}/train/ (48 objects) needs 6.")
    needed, free = re.search(r"needs ([0-9.]+) MiB .*, ([0-9.]+ \w+) free", message).groups()
    assert float(needed) > 6 and not free.endswith("GiB"), message
    assert leftovers(cache_dir) == []  # the partial download is gone, nothing under a final name
    assert [e.key for e in new_cache(disk.path / "ws").entries()] == [done.key]  # the complete entry is kept

    disk.free()
    s3_proxy.reset()
    again = new_cache(disk.path / "ws")
    assert again.prefetch(f"s3://{bucket}/labels/", user="job-a").reused  # complete: zero object bytes
    assert s3_proxy.object_requests() == []
    entry = again.prefetch(f"s3://{bucket}/train/", user="job-a")
    assert read_tree(entry.path) == train and read_tree(done.path) == labels
    assert leftovers(cache_dir) == []


def test_unused_entries_are_evicted_to_make_room_on_a_full_disk_and_entries_in_use_are_not(
        small_disk, storage_connections, object_store):
    disk = small_disk(12 * MiB)
    bucket = object_store.bucket()
    put_channel(object_store, bucket, "old/", 4, MiB)
    put_channel(object_store, bucket, "pinned/", 2, MiB)
    new = put_channel(object_store, bucket, "new/", 5, MiB)
    cache = new_cache(disk.path / "ws")
    old = cache.prefetch(f"s3://{bucket}/old/", user="finished-job")
    pinned = cache.prefetch(f"s3://{bucket}/pinned/", user="running-job")
    cache.release("finished-job")
    disk.fill(leave=disk.free_bytes() - 2 * MiB)  # ~4.5 MiB free: the new channel fits only without the old entry

    entry = cache.prefetch(f"s3://{bucket}/new/", user="next-job")

    assert read_tree(entry.path) == new
    assert {e.key for e in cache.entries()} == {pinned.key, entry.key}  # the unused entry made room
    assert not os.path.exists(old.entry_dir)
    with pytest.raises(DiskFullError):  # the pinned one is never evicted, so the next big channel cannot fit
        put_channel(object_store, bucket, "more/", 6, MiB)
        cache.prefetch(f"s3://{bucket}/more/", user="other-job")
    assert os.path.isdir(pinned.path)


def test_packing_a_model_that_cannot_fit_fails_before_packing_and_publishes_nothing(small_disk, storage_connections,
                                                                                    object_store, s3_proxy):
    disk = small_disk(16 * MiB)
    model = disk.path / "jobs" / "j" / "model"
    model.mkdir(parents=True)
    (model / "weights.bin").write_bytes(os.urandom(6 * MiB))
    disk.fill(leave=3 * MiB)
    bucket = object_store.bucket()
    uri = f"s3://{bucket}/models/j/output/model.tar.gz"
    archive = disk.path / "jobs" / "j" / ".artifacts" / "model.tar.gz"
    storage = ObjectStorageHook(None, settings=TrainingSettings(workspace=str(disk.path)))

    with pytest.raises(DiskFullError) as caught:
        storage.upload_packed_directory(str(model), uri, str(archive))

    message = str(caught.value)
    assert message.startswith(f"disk full: packing model.tar.gz (1 files of {model}) needs 6.")
    assert f" in {archive.parent}, " in message and "nothing was published" in message
    needed, free = figures(message)
    assert 6.0 <= needed < 6.5 and 2.5 < free <= 3.0
    assert s3_proxy.snapshot() == []  # nothing sent
    assert not archive.parent.exists() or list(archive.parent.iterdir()) == []

    disk.free()
    storage.upload_packed_directory(str(model), uri, str(archive))
    body = object_store.client.get_object(Bucket=bucket, Key="models/j/output/model.tar.gz")["Body"].read()
    assert body == archive.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.extractfile("weights.bin").read() == (model / "weights.bin").read_bytes()


def test_a_disk_filling_while_packing_aborts_the_multipart_upload_and_the_retry_publishes_the_whole_model(
        small_disk, storage_connections, object_store, s3_proxy, monkeypatch):
    disk = small_disk(64 * MiB)
    model = disk.path / "jobs" / "j" / "model"
    model.mkdir(parents=True)
    weights = os.urandom(20 * MiB)  # incompressible, above the 8 MiB multipart threshold: parts go up while packing
    (model / "weights.bin").write_bytes(weights)
    artifacts = disk.path / "jobs" / "j" / ".artifacts"
    bucket = object_store.bucket()
    key = "models/j/output/model.tar.gz"
    storage = ObjectStorageHook(None, settings=TrainingSettings(workspace=str(disk.path)))
    disk.fill(leave=12 * MiB)  # room for 12 of the 20 MiB: the first part goes up, then the disk is full
    # Packing is faster than any watcher thread, so instead of filling the disk half-way, the up-front check is
    # switched off (as if another writer took the space right after it): the real ENOSPC comes mid-pack.
    monkeypatch.setattr(storage_hook, "check_pack_space", lambda src, archive, within=None: None)

    with pytest.raises(DiskFullError) as caught:
        storage.upload_packed_directory(str(model), f"s3://{bucket}/{key}", str(artifacts / "model.tar.gz"))

    assert str(caught.value).startswith(f"disk full: packing model.tar.gz (1 files of {model}) needs 20.")
    assert any(r["query"] == "uploads=" or "uploadId" in r["query"] for r in s3_proxy.snapshot())  # multipart began
    assert object_store.keys(bucket) == []  # no truncated model under the output path
    assert object_store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []  # aborted
    assert list(artifacts.iterdir()) == []  # no half archive in the job root

    disk.free()
    storage.upload_packed_directory(str(model), f"s3://{bucket}/{key}", str(artifacts / "model.tar.gz"))
    body = object_store.client.get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.extractfile("weights.bin").read() == weights


def test_a_full_disk_at_a_local_output_path_leaves_no_partial_model_there(small_disk, tmp_path):
    jobs, outputs = small_disk(32 * MiB), small_disk(8 * MiB)
    model = jobs.path / "jobs" / "j" / "model"
    model.mkdir(parents=True)
    (model / "weights.bin").write_bytes(os.urandom(6 * MiB))
    archive = jobs.path / "jobs" / "j" / ".artifacts" / "model.tar.gz"
    published = outputs.path / "models" / "j" / "output" / "model.tar.gz"
    outputs.fill(leave=2 * MiB)  # the shared file system the models go to is full
    storage = ObjectStorageHook(None, settings=TrainingSettings(workspace=str(jobs.path)))

    with pytest.raises(DiskFullError) as caught:
        storage.upload_packed_directory(str(model), str(published), str(archive))

    message = str(caught.value)
    assert message.startswith(f"disk full: cannot copy {published}: no space left on the file system of "
                              f"{published.parent}/.model.tar.gz.part-"), message
    assert [p.name for p in published.parent.iterdir()] == []  # no partial model.tar.gz (nor its temp file)
    assert archive.is_file()  # packed: a retry only copies it

    outputs.free()
    storage.upload_packed_directory(str(model), str(published), str(archive))
    assert published.read_bytes() == archive.read_bytes()


def test_the_packing_check_counts_blocks_and_a_linked_file_once(tmp_path):
    # Issue 47: the check summed st_size: 32 names of one file were 32 files, and a sparse file what it claims.
    from operators.storage.disk_space import tree_space

    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(os.urandom(MiB))
    for i in range(31):
        os.link(model / "weights.bin", model / f"copy-{i}.bin")
    with open(model / "sparse.bin", "wb") as fh:
        fh.truncate(64 * 1024 * MiB)  # 64 GiB it says, no block it holds
    (model / "elsewhere").symlink_to(tmp_path)  # followed by nothing

    needed, names = tree_space(str(model), str(tmp_path / "model.tar.gz"))
    assert names == 33
    assert MiB < needed < MiB + 256 * 1024  # one copy of the weights, 33 tar headers, the archive's slack

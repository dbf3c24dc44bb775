"""DataCacheHook against a real S3 endpoint: warm hits cost 0 object bytes, entries are complete or absent."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cache_trees import entry_dirs, new_cache, put_tree, read_tree

from operators.cache.eviction import COMPLETE_MARKER
from operators.storage.hook import StorageError
from operators.settings import TrainingSettings

KiB = 1024


@pytest.fixture
def settings(tmp_path) -> TrainingSettings:
    return TrainingSettings(workspace=str(tmp_path / "ws"), transfer_concurrency=4)


def test_cold_then_warm_prefetch_transfers_zero_object_bytes(settings, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    files = {"part-0.csv": os.urandom(100 * KiB), "part-1.csv": os.urandom(50 * KiB), "meta/schema.json": b"{}"}
    put_tree(object_store, bucket, "datasets/train/", files)

    cold = new_cache(settings).prefetch(f"s3://{bucket}/datasets/train", user="job-a")

    assert not cold.reused and not cold.is_file
    assert (cold.files, cold.bytes, cold.bytes_transferred) == (3, 150 * KiB + 2, 150 * KiB + 2)
    assert read_tree(cold.path) == files
    assert s3_proxy.bytes_out("GET") >= cold.bytes and len(s3_proxy.object_requests()) == 3
    assert (Path(cold.entry_dir) / COMPLETE_MARKER).is_file()
    assert not os.stat(Path(cold.path) / "part-0.csv").st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    s3_proxy.reset()

    warm = new_cache(settings).prefetch(f"s3://{bucket}/datasets/train/", user="job-b")

    assert warm.reused and warm.bytes_transferred == 0
    assert (warm.key, warm.path) == (cold.key, cold.path)
    requests = s3_proxy.snapshot()
    assert requests and all("list-type=2" in r["query"] for r in requests)  # only the LIST
    assert s3_proxy.object_requests() == []  # zero object bytes at the server
    infos = new_cache(settings).entries()
    assert [(i.key, i.users) for i in infos] == [(cold.key, ("job-a", "job-b"))]


def test_changed_object_invalidates_only_its_entry(settings, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    put_tree(object_store, bucket, "a/", {"x.txt": b"x1", "y.txt": b"y1"})
    object_store.put(bucket, "b/labels.csv", b"labels")
    cache = new_cache(settings)
    a1 = cache.prefetch(f"s3://{bucket}/a/", user="job-1")
    b1 = cache.prefetch(f"s3://{bucket}/b/labels.csv", user="job-1")
    assert b1.is_file and b1.file_name == "labels.csv"

    object_store.put(bucket, "a/y.txt", b"y2, changed")
    s3_proxy.reset()
    cache = new_cache(settings)
    a2 = cache.prefetch(f"s3://{bucket}/a/", user="job-2")
    b2 = cache.prefetch(f"s3://{bucket}/b/labels.csv", user="job-2")

    assert not a2.reused and a2.key != a1.key
    assert read_tree(a2.path) == {"x.txt": b"x1", "y.txt": b"y2, changed"}
    assert b2.reused and b2.key == b1.key and b2.bytes_transferred == 0
    fetched = sorted(r["path"].split("/", 2)[2] for r in s3_proxy.object_requests())
    assert fetched == ["a/x.txt", "a/y.txt"]  # nothing of channel b
    assert read_tree(a1.path) == {"x.txt": b"x1", "y.txt": b"y1"}  # the old entry is left for LRU, untouched


_PREFETCH_SCRIPT = """
import sys
from operators.cache.data_cache import DataCacheHook
from operators.storage.hook import ObjectStorageHook
from operators.settings import TrainingSettings
settings = TrainingSettings(workspace=sys.argv[1], transfer_concurrency=4)
DataCacheHook(settings.cache_dir, ObjectStorageHook(settings=settings)).prefetch(sys.argv[2], user="doomed-job")
print("finished")
"""


def test_killed_download_leaves_no_complete_entry_and_next_prefetch_repairs(
    settings, storage_connections, object_store, s3_proxy, repo_root
):
    bucket = object_store.bucket()
    files = {"blob.bin": os.urandom(3 * 1024 * KiB), "small.txt": b"small"}
    put_tree(object_store, bucket, "big/", files)
    uri = f"s3://{bucket}/big/"
    s3_proxy.throttle_bytes_per_s = 512 * KiB  # the 3 MiB object takes ~6 s: plenty of time to kill it
    cache_dir = Path(settings.cache_dir)

    child = subprocess.Popen(
        [sys.executable, "-c", _PREFETCH_SCRIPT, settings.workspace, uri],
        cwd=repo_root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            partial = [p for p in cache_dir.glob("tmp-*/data/**/*") if p.is_file() and p.stat().st_size > 64 * KiB]
            if partial:
                break
            assert child.poll() is None, child.stdout.read().decode()
            time.sleep(0.05)
        else:
            pytest.fail("the child never started writing the download")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL

    assert entry_dirs(settings) == []  # nothing that looks like an entry
    assert list(cache_dir.rglob(COMPLETE_MARKER)) == []
    assert list(cache_dir.glob("tmp-*"))  # only the debris of the killed download

    s3_proxy.throttle_bytes_per_s = 0
    cache = new_cache(settings)
    repaired = cache.prefetch(uri, user="retry-job")

    assert not repaired.reused and read_tree(repaired.path) == files
    assert list(cache_dir.glob("tmp-*")) == []
    assert [(i.key, i.users) for i in cache.entries()] == [(repaired.key, ("retry-job",))]


def test_two_concurrent_prefetches_of_one_channel_download_once(
    settings, storage_connections, object_store, s3_proxy, caplog
):
    caplog.set_level(logging.INFO, logger="operators.cache.eviction")  # the key lock logs the wait
    bucket = object_store.bucket()
    data = os.urandom(512 * KiB)
    object_store.put(bucket, "shared/data.bin", data)
    s3_proxy.throttle_bytes_per_s = 1024 * KiB  # ~0.5 s download: the two prefetches overlap
    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def run(user: str) -> None:
        cache = new_cache(settings)
        start.wait()
        try:
            results[user] = cache.prefetch(f"s3://{bucket}/shared/", user=user)
        except BaseException as err:  # noqa: BLE001 - reported by the assertions below
            results[user] = err

    threads = [threading.Thread(target=run, args=(u,)) for u in ("job-x", "job-y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    entries = [results["job-x"], results["job-y"]]
    assert all(not isinstance(e, BaseException) for e in entries), entries
    assert sorted(e.reused for e in entries) == [False, True]
    assert entries[0].path == entries[1].path
    assert (Path(entries[0].path) / "data.bin").read_bytes() == data
    assert sum(r["bytes_out"] for r in s3_proxy.object_requests()) == len(data)  # downloaded exactly once
    assert [i.users for i in new_cache(settings).entries()] == [("job-x", "job-y")]
    assert "being prefetched by another task; waiting" in caplog.text  # they really did collide



def test_cos_and_local_channels_and_connection_in_key(settings, storage_connections, object_store, cos_proxy, tmp_path):
    bucket = object_store.bucket()
    object_store.put(bucket, "ds/x.txt", b"x")
    by_default = new_cache(settings).prefetch(f"cos://{bucket}/ds/", user="job")
    by_named = new_cache(settings, connections={"cos": "my_cos"}).prefetch(f"cos://{bucket}/ds/", user="job")
    assert cos_proxy.object_requests()
    assert by_default.key != by_named.key  # another connection may be another store: another entry

    local = tmp_path / "nfs" / "dataset"
    local.mkdir(parents=True)
    (local / "f.txt").write_text("local")
    first = new_cache(settings).prefetch(str(local), user="job")
    assert read_tree(first.path) == {"f.txt": b"local"} and not first.reused
    assert new_cache(settings).prefetch(f"file://{local}/", user="job").reused
    (local / "f.txt").write_text("changed")
    assert not new_cache(settings).prefetch(str(local), user="job").reused

    with pytest.raises(StorageError, match="nothing to prefetch"):
        new_cache(settings).prefetch(f"s3://{bucket}/empty/", user="job")


def test_channel_of_1100_objects_lists_in_parallel_ranges_when_warm(settings, storage_connections, many_objects, s3_proxy):
    cold = new_cache(settings).prefetch(many_objects.uri, user="job-a")

    assert read_tree(cold.path) == many_objects.files
    cold_lists = [r for r in s3_proxy.snapshot() if "list-type=2" in r["query"]]
    assert len(cold_lists) == 2 and "continuation-token=" in cold_lists[1]["query"]  # 1,000 keys a page
    s3_proxy.reset()

    warm = new_cache(settings).prefetch(many_objects.uri, user="job-b")

    assert warm.reused and warm.key == cold.key and warm.bytes_transferred == 0
    warm_lists = [r for r in s3_proxy.snapshot() if "list-type=2" in r["query"]]
    # Cut at the 1,000th key of the cold listing: two ranges listed at once, neither needs a continuation token.
    assert len(warm_lists) == 2 and not any("continuation-token=" in r["query"] for r in warm_lists)
    assert sum("start-after=" in r["query"] for r in warm_lists) == 1
    assert s3_proxy.object_requests() == []

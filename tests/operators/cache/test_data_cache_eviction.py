"""CacheEntries (pins, LRU eviction) through DataCacheHook.prefetch against a real S3 endpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cache_trees import entry_dirs, new_cache

from operators.settings import TrainingSettings

KiB = 1024


@pytest.fixture
def settings(tmp_path) -> TrainingSettings:
    return TrainingSettings(workspace=str(tmp_path / "ws"), transfer_concurrency=4)


def test_lru_eviction_never_evicts_an_entry_in_use(settings, storage_connections, object_store):
    bucket = object_store.bucket()
    for name in ("c1", "c2", "c3"):
        object_store.put(bucket, f"{name}/data.bin", os.urandom(100 * KiB))
    limit = 250 * KiB
    e1 = new_cache(settings, limit).prefetch(f"s3://{bucket}/c1/", user="job-1")  # oldest, stays in use
    e2 = new_cache(settings, limit).prefetch(f"s3://{bucket}/c2/", user="job-2")
    new_cache(settings, limit).release("job-2")  # job-2 finished: its entry may go

    e3 = new_cache(settings, limit).prefetch(f"s3://{bucket}/c3/", user="job-3")

    assert set(entry_dirs(settings)) == {e1.key, e3.key}  # e2 went, although e1 is older
    assert (Path(e1.path) / "data.bin").stat().st_size == 100 * KiB

    cache = new_cache(settings, limit)
    assert cache.release("job-1") == [e1.key]
    again = cache.prefetch(f"s3://{bucket}/c2/", user="job-4")  # now e1 is the LRU unused entry
    assert not again.reused and again.key == e2.key
    assert set(entry_dirs(settings)) == {e2.key, e3.key}
    assert cache.total_bytes() <= limit

    # Everything in use: the cache goes over its limit rather than pull data from under a running job.
    e1b = new_cache(settings, limit).prefetch(f"s3://{bucket}/c1/", user="job-5")
    assert set(entry_dirs(settings)) == {e1b.key, e2.key, e3.key}

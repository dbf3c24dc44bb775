"""cache_views.link_view: a job's input/data/<channel> shows a real cache entry (prefetched from a real S3 endpoint)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cache_trees import new_cache, put_tree, read_tree

from operators.cache.views import link_view
from operators.settings import TrainingSettings


@pytest.fixture
def settings(tmp_path) -> TrainingSettings:
    return TrainingSettings(workspace=str(tmp_path / "ws"), transfer_concurrency=4)


def test_link_view_symlink_hardlink_and_single_file(settings, storage_connections, object_store, tmp_path):
    bucket = object_store.bucket()
    put_tree(object_store, bucket, "imgs/", {"a.png": b"A", "sub/b.png": b"B"})
    object_store.put(bucket, "tables/train.csv", b"1,2,3")
    cache = new_cache(settings)
    directory = cache.prefetch(f"s3://{bucket}/imgs/", user="job")
    single = cache.prefetch(f"s3://{bucket}/tables/train.csv", user="job")
    job_data = tmp_path / "ws" / "jobs" / "job" / "input" / "data"
    (job_data / "images").mkdir(parents=True)  # the layout creates empty channel dirs before prefetch

    view = Path(link_view(directory, str(job_data / "images")))
    assert view.is_symlink() and not os.path.isabs(os.readlink(view))  # one relative symlink
    assert read_tree(view) == {"a.png": b"A", "sub/b.png": b"B"}
    link_view(directory, str(job_data / "images"))  # idempotent (task retries)
    assert read_tree(view) == {"a.png": b"A", "sub/b.png": b"B"}

    hard = Path(link_view(directory, str(job_data / "images"), mode="hardlink"))
    assert hard.is_dir() and not hard.is_symlink()
    assert os.stat(hard / "sub" / "b.png").st_ino == os.stat(Path(directory.path) / "sub" / "b.png").st_ino

    table = Path(link_view(single, str(job_data / "train")))
    assert sorted(os.listdir(table)) == ["train.csv"] and (table / "train.csv").read_bytes() == b"1,2,3"
    assert (table / "train.csv").is_symlink()
    assert sorted(os.listdir(job_data)) == ["images", "train"]  # no staging leftovers

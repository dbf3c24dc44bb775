"""Channels in a real S3 bucket and a fresh DataCacheHook, for the data cache's tests (prefetch, eviction, views)."""

from __future__ import annotations

from pathlib import Path

from operators.cache.data_cache import DataCacheHook
from operators.storage.hook import ObjectStorageHook
from operators.settings import TrainingSettings


def new_cache(settings: TrainingSettings, max_bytes: int = 0, connections=None) -> DataCacheHook:
    """A fresh hook pair, as a new Airflow task would build it."""
    return DataCacheHook(settings.cache_dir, ObjectStorageHook(connections, settings=settings), max_bytes=max_bytes)


def put_tree(object_store, bucket: str, prefix: str, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        object_store.put(bucket, f"{prefix}{rel}", data)


def read_tree(root) -> dict[str, bytes]:
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def entry_dirs(settings) -> list[str]:
    cache = Path(settings.cache_dir)
    return sorted(p.name for p in cache.iterdir() if len(p.name) == 64) if cache.exists() else []

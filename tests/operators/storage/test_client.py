"""Clients from Airflow connections: a process parses botocore's data (the S3 service model, endpoint rules; ~0.3 s
of CPU) once, not once per hook (the API server builds a hook per artifact link, a warm cache check one per task)."""

from __future__ import annotations

from botocore.loaders import JSONFileLoader

from operators.settings import TrainingSettings
from operators.storage.hook import ObjectStorageHook


def test_a_second_hook_builds_its_client_without_parsing_botocore_data_again(tmp_path, storage_connections,
                                                                             object_store, monkeypatch):
    bucket = object_store.bucket()
    object_store.put(bucket, "data/a.txt", b"a")
    settings = TrainingSettings(workspace=str(tmp_path / "ws"))
    assert [o.key for o in ObjectStorageHook(settings=settings).list_objects(f"s3://{bucket}/data/")] == ["data/a.txt"]

    loaded = []
    original = JSONFileLoader.load_file
    monkeypatch.setattr(JSONFileLoader, "load_file", lambda self, path: loaded.append(path) or original(self, path))
    second = ObjectStorageHook(settings=settings)
    assert [o.key for o in second.list_objects(f"s3://{bucket}/data/")] == ["data/a.txt"]
    assert second.read_bytes(f"s3://{bucket}/data/a.txt") == b"a"
    assert loaded == []

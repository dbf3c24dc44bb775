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
    uri = f"s3://{bucket}/data/a.txt"
    # A presigned link needs the botocore client (listings and downloads go through obstore and build none).
    assert ObjectStorageHook(settings=settings).presigned_url(uri).startswith("http://127.0.0.1:")

    loaded = []
    original = JSONFileLoader.load_file
    monkeypatch.setattr(JSONFileLoader, "load_file", lambda self, path: loaded.append(path) or original(self, path))
    second = ObjectStorageHook(settings=settings)
    assert [o.key for o in second.list_objects(f"s3://{bucket}/data/")] == ["data/a.txt"]
    assert second.read_bytes(uri) == b"a"
    assert second.presigned_url(uri).startswith("http://127.0.0.1:")
    assert loaded == []

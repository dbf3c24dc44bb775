"""The Store interface: the local store (paths, file://) and the remote store (MinIO on loopback, through the
counting proxy) behave alike for everything the pipeline does, and each says what a message needs."""

from __future__ import annotations

import urllib.request

import pytest

from operators.settings import TrainingSettings
from operators.storage.errors import StorageError
from operators.storage.hook import ObjectStorageHook
from operators.storage.location import DEFAULT_CONNECTIONS, parse_uri
from operators.storage.stores import LocalStore, RemoteStore

TREE = {"a.txt": b"alpha\n", "sub/b.bin": bytes(range(256)) * 64, "sub/deeper/c.json": b'{"c": 3}'}


def make_hook(tmp_path, connections=None) -> ObjectStorageHook:
    return ObjectStorageHook(connections=connections, settings=TrainingSettings(workspace=str(tmp_path / "ws")))


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path, storage_connections, object_store) -> str:
    """A prefix on either store, as a job would name it (a path, or s3://bucket/prefix/)."""
    if request.param == "local":
        return f"file://{tmp_path / 'store'}/"
    return f"s3://{object_store.bucket()}/jobs/"


def write_tree(directory) -> None:
    for rel, data in TREE.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_both_stores_round_trip_a_tree_alike(tmp_path, root):
    hook = make_hook(tmp_path)
    src = tmp_path / "src"
    write_tree(src)

    stats = hook.upload_dir(str(src), root + "model")
    assert (stats.files, stats.bytes) == (3, sum(map(len, TREE.values())))

    listing = hook.describe(root + "model")
    assert listing.is_prefix
    assert {o.relative_path: o.size for o in listing.objects} == {rel: len(d) for rel, d in TREE.items()}
    assert hook.is_prefix(root + "model") and hook.exists(root + "model/sub/b.bin")
    assert not hook.exists(root + "missing")
    assert hook.read_bytes(root + "model/sub/deeper/c.json") == TREE["sub/deeper/c.json"]

    dest = tmp_path / "dest"
    hook.download(root + "model/", str(dest))
    assert {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()} == TREE

    hook.write_bytes(root + "model/marker", b"done")
    assert hook.read_bytes(root + "model/marker") == b"done"
    assert hook.delete(root + "model") == 4
    assert hook.list_objects(root + "model") == []


def test_an_empty_location_is_one_line_naming_the_store_and_its_connection(tmp_path, root):
    hook = make_hook(tmp_path)
    with pytest.raises(StorageError) as info:
        hook.download(root + "nothing-here/", str(tmp_path / "dest"))
    message = str(info.value)
    assert "\n" not in message and "nothing to download at" in message
    if root.startswith("s3://"):
        assert root + "nothing-here/" in message and "via connection 'aws_default'" in message
    else:
        assert str(tmp_path / "store" / "nothing-here") in message and "via connection" not in message


def test_each_location_gets_its_store_one_remote_store_per_connection(tmp_path, storage_connections):
    hook = make_hook(tmp_path, connections={"cos": "my_cos"})
    local = hook.store(str(tmp_path / "x"))
    assert isinstance(local, LocalStore) and local.connection_id is None
    assert local is hook.store(f"file://{tmp_path}/y")
    assert local.local_path(parse_uri(str(tmp_path / "x"))) == str(tmp_path / "x")

    s3 = hook.store("s3://bucket-a/x")
    assert isinstance(s3, RemoteStore) and s3 is hook.store("s3://bucket-b/y")
    assert s3.connection_id == DEFAULT_CONNECTIONS["s3"]
    assert s3.local_path(parse_uri("s3://bucket-a/x")) is None
    cos = hook.store("cos://bucket-1250000000/code/")
    assert cos.connection_id == "my_cos" and cos.via == " via connection 'my_cos'"


def test_links_a_remote_object_and_refuses_to_link_a_local_file(tmp_path, storage_connections, object_store):
    hook = make_hook(tmp_path)
    bucket = object_store.bucket()
    object_store.put(bucket, "out/model.tar.gz", b"model bytes")
    url = hook.presigned_url(f"s3://{bucket}/out/model.tar.gz", 60)
    assert object_store.server.secret_key not in url
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.read() == b"model bytes"

    (tmp_path / "model.tar.gz").write_bytes(b"local")
    assert hook.local_path(str(tmp_path / "model.tar.gz")) == str(tmp_path / "model.tar.gz")
    with pytest.raises(StorageError, match="a local path has no URL"):
        hook.presigned_url(str(tmp_path / "model.tar.gz"))


def test_the_spec_and_the_trigger_form_accept_exactly_the_storage_schemes():
    from operators.pipelines.params import field_schemas
    from operators.jobspec.model import SCHEMES

    assert SCHEMES == tuple(DEFAULT_CONNECTIONS)
    assert field_schemas()["connections"]["propertyNames"]["enum"] == list(DEFAULT_CONNECTIONS)

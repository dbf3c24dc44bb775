"""Listing through obstore against real MinIO: the same objects as the botocore listing (directory markers skipped,
odd keys, split key ranges, single objects), one-line errors, and no botocore client anywhere on the obstore path
(prefetch, a warm cache hit, code staging)."""

from __future__ import annotations

import os

import pytest
from cache_trees import new_cache, put_tree

from operators.fs.safe_tar import pack_directory
from operators.settings import TrainingSettings
from operators.staging.code import stage_code
from operators.storage import remote as storage_client
from operators.storage.errors import StorageError
from operators.storage.hook import ObjectStorageHook
from operators.storage.listing import describe_remote, exact_object, list_prefix
from operators.storage.location import parse_uri
from operators.storage.remote import make_remote

KEYS = {
    "d/a b.txt": b"space",
    "d/\u00fc/x": b"unicode",
    "d/q+r%2Fs": b"plus and percent",
    "d/empty": b"",  # an empty file, not a marker
    "d/marker/": b"",  # a console's directory marker: skipped
    "d/marker/f": b"under the marker",
    "d/only-marker/": b"",  # a marker alone: nothing to download
    "d/": b"",  # the prefix's own marker
    "d/z.bin": os.urandom(3000),
    "d2/other": b"not under d/",
}


@pytest.fixture
def bucket(object_store):
    name = object_store.bucket()
    for key, data in KEYS.items():
        object_store.put(name, key, data)
    return name


def _listing(objects):
    return [(o.key, o.relative_path, o.size, o.etag, round(o.last_modified, 3)) for o in objects]


@pytest.fixture
def built_clients(monkeypatch):
    """How many botocore clients were built (each parses botocore's S3 model: ~0.3 s of CPU)."""
    built: list[str] = []
    original = storage_client._Connection.build_client
    monkeypatch.setattr(storage_client._Connection, "build_client",
                        lambda self: built.append(self.loc.uri) or original(self))
    return built


def _remote(bucket):
    return make_remote(parse_uri(f"s3://{bucket}/d/"), "aws_default", 4)


@pytest.mark.parametrize("split_after", [(), ("d/a b.txt", "d/marker/f", "d/q+r%2Fs")])
def test_obstore_lists_what_botocore_lists(storage_connections, bucket, s3_proxy, built_clients, monkeypatch,
                                           split_after):
    loc = parse_uri(f"s3://{bucket}/d/")
    ours = list_prefix(_remote(bucket), 4, loc, "d/", split_after)
    assert built_clients == []
    assert all("list-type=2" in r["query"] or r["method"] == "HEAD" for r in s3_proxy.snapshot())

    monkeypatch.setattr("operators.storage.listing._store", lambda remote, bucket: None)  # the botocore listing
    theirs = list_prefix(_remote(bucket), 4, loc, "d/", split_after)

    assert _listing(ours) == _listing(theirs)
    assert [o.relative_path for o in ours] == ["a b.txt", "empty", "marker/f", "q+r%2Fs", "z.bin", "\u00fc/x"]


def test_single_objects_and_markers_are_told_apart_by_a_listing(storage_connections, bucket, s3_proxy,
                                                                built_clients):
    remote = _remote(bucket)

    found = {key: exact_object(remote, parse_uri(f"s3://{bucket}/{key}"))
             for key in ("d/z.bin", "d/empty", "d/only-marker", "d/missing", "d2/other")}

    assert {key: item and (item["Key"], item["Size"]) for key, item in found.items()} == {
        "d/z.bin": ("d/z.bin", 3000), "d/empty": ("d/empty", 0), "d/only-marker": None, "d/missing": None,
        "d2/other": ("d2/other", len(b"not under d/"))}
    single = describe_remote(remote, 4, parse_uri(f"s3://{bucket}/d/z.bin"))
    assert (single.is_prefix, [o.relative_path for o in single.objects]) == (False, ["z.bin"])
    assert built_clients == []
    # the non-empty object was found by a LIST alone (a warm hit of a single-object channel asks for nothing else)
    assert sum(1 for r in s3_proxy.snapshot() if r["method"] == "HEAD") == 2  # "d/empty", "d/only-marker"


def test_a_bucket_the_connection_may_not_list_is_one_line(storage_connections, bucket, s3_proxy, built_clients):
    s3_proxy.fail_requests(403, "AccessDenied")
    with pytest.raises(StorageError) as info:
        ObjectStorageHook(settings=TrainingSettings(workspace="/nonexistent")).list_objects(f"s3://{bucket}/d/")
    message = str(info.value)
    assert message.startswith(f"access denied to s3://{bucket}/d/ via connection 'aws_default'"), message
    assert "\n" not in message and s3_proxy.snapshot()


def test_prefetch_warm_hit_and_code_staging_build_no_botocore_client(tmp_path, storage_connections, object_store,
                                                                     s3_proxy, built_clients):
    bucket = object_store.bucket()
    put_tree(object_store, bucket, "train/", {"a.csv": os.urandom(5000), "sub/b.csv": b"b" * 100})
    big = os.urandom(9 * 1024 * 1024)  # above the multipart threshold: ranged GETs
    object_store.put(bucket, "big/blob.bin", big)
    code = tmp_path / "code"
    (code / "lib").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "lib" / "__init__.py").write_text("")
    for path in ("train.py", "lib/__init__.py"):
        object_store.put(bucket, f"code/{path}", (code / path).read_bytes())
    pack_directory(str(code), str(tmp_path / "code.tar.gz"))
    object_store.put(bucket, "code.tar.gz", (tmp_path / "code.tar.gz").read_bytes())
    settings = TrainingSettings(workspace=str(tmp_path / "ws"), transfer_concurrency=4)

    cold = new_cache(settings).prefetch(f"s3://{bucket}/train/", user="job-a")
    large = new_cache(settings).prefetch(f"s3://{bucket}/big/blob.bin", user="job-a")
    warm = new_cache(settings).prefetch(f"s3://{bucket}/train/", user="job-b")
    warm_single = new_cache(settings).prefetch(f"s3://{bucket}/big/blob.bin", user="job-b")
    hook = ObjectStorageHook(settings=settings)
    stage_code(hook, f"s3://{bucket}/code/", str(tmp_path / "job1" / "code"))
    stage_code(hook, f"s3://{bucket}/code.tar.gz", str(tmp_path / "job2" / "code"))

    assert (cold.reused, large.reused, warm.reused, warm_single.reused) == (False, False, True, True)
    assert large.is_file and open(os.path.join(large.path, large.file_name), "rb").read() == big
    assert (tmp_path / "job1" / "code" / "lib" / "__init__.py").read_bytes() == b""
    assert (tmp_path / "job2" / "code" / "train.py").read_text() == "print('hi')\n"
    assert built_clients == []

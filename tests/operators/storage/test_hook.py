"""ObjectStorageHook against a real S3 server (MinIO on loopback, behind counting proxies)."""

from __future__ import annotations

import hashlib
import logging
import os
import time

import pytest

from operators.storage.hook import ObjectStorageHook, StorageError, StorageLocation, parse_uri
from operators.settings import TrainingSettings

MiB = 1024 * 1024


def make_hook(tmp_path, connections=None, **settings) -> ObjectStorageHook:
    progress_interval = settings.pop("progress_interval", 5.0)
    return ObjectStorageHook(
        connections=connections,
        settings=TrainingSettings(workspace=str(tmp_path / "ws"), **settings),
        progress_interval=progress_interval,
    )


def object_gets(proxy) -> list[dict]:
    return [r for r in proxy.object_requests() if r["method"] == "GET"]


def listings(proxy) -> list[dict]:
    return [r for r in proxy.snapshot() if "list-type=2" in r["query"]]


# -- URIs --------------------------------------------------------------------------------------------------------


def test_parse_uri_schemes_and_local_paths(tmp_path):
    assert parse_uri("s3://bucket/data/train/") == StorageLocation("s3", "bucket", "data/train/")
    assert parse_uri("COS://bucket-1250000000/x.tar.gz") == StorageLocation("cos", "bucket-1250000000", "x.tar.gz")
    assert parse_uri("oss://b/") == StorageLocation("oss", "b", "")
    assert parse_uri("obs://b") == StorageLocation("obs", "b", "")
    assert parse_uri(f"file://{tmp_path}/a%20b").local_path == f"{tmp_path}/a b"
    assert parse_uri(str(tmp_path / "x")).local_path == str(tmp_path / "x")
    assert parse_uri("relative/dir").local_path == os.path.abspath("relative/dir")
    assert parse_uri("s3://bucket/data/train").child("a/b.txt").uri == "s3://bucket/data/train/a/b.txt"


@pytest.mark.parametrize(
    "uri", ["s3://bucket/data/../secrets", "cos://bucket/../x", "s3://bucket/a/./b", "oss://bucket/a//b", "s3://b/.."]
)
def test_parse_uri_refuses_keys_that_escape_the_destination(uri):
    with pytest.raises(StorageError) as info:
        parse_uri(uri)
    assert uri in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("uri", ["gs://bucket/x", "s3:///key", ""])
def test_parse_uri_refuses_unsupported_or_empty(uri):
    with pytest.raises(StorageError):
        parse_uri(uri)


# -- s3:// with aws_default ---------------------------------------------------------------------------------------


def test_s3_prefix_download_uses_aws_default_with_one_get_per_object(tmp_path, storage_connections, object_store, s3_proxy, cos_proxy):
    bucket = object_store.bucket()
    files = {"a.txt": b"alpha", "sub/b.bin": os.urandom(70_000), "sub/deeper/c.txt": b"gamma" * 10}
    for rel, data in files.items():
        object_store.put(bucket, f"data/{rel}", data)
    object_store.put(bucket, "data/", b"")  # a console-style "folder" marker is skipped
    object_store.put(bucket, "database/other.txt", b"not under data/")
    hook = make_hook(tmp_path)

    stats = hook.download(f"s3://{bucket}/data", str(tmp_path / "out"))

    assert (stats.files, stats.bytes) == (3, sum(len(v) for v in files.values()))
    for rel, data in files.items():
        assert (tmp_path / "out" / rel).read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.txt", "sub"]  # no temp names left
    assert len(listings(s3_proxy)) == 1
    assert len(object_gets(s3_proxy)) == 3  # sizes/ETags come from the listing: no HEAD per object
    assert not [r for r in s3_proxy.snapshot() if r["method"] == "HEAD"]
    assert cos_proxy.snapshot() == []
    assert hook.is_prefix(f"s3://{bucket}/data") and not hook.is_prefix(f"s3://{bucket}/data/a.txt")
    assert [o.relative_path for o in hook.list_objects(f"s3://{bucket}/data/")] == ["a.txt", "sub/b.bin", "sub/deeper/c.txt"]
    single = hook.list_objects(f"s3://{bucket}/data/a.txt")
    assert [(o.key, o.relative_path, o.size, o.etag) for o in single] == [
        ("data/a.txt", "a.txt", 5, hashlib.md5(b"alpha").hexdigest())
    ]
    assert abs(single[0].last_modified - time.time()) < 600  # for "latest" lookups


def test_single_object_download_to_file_and_into_directory(tmp_path, storage_connections, object_store):
    bucket = object_store.bucket()
    object_store.put(bucket, "models/m.bin", b"weights")
    hook = make_hook(tmp_path)
    hook.download(f"s3://{bucket}/models/m.bin", str(tmp_path / "file.bin"))
    assert (tmp_path / "file.bin").read_bytes() == b"weights"
    (tmp_path / "dir").mkdir()
    hook.download(f"s3://{bucket}/models/m.bin", str(tmp_path / "dir"))
    assert (tmp_path / "dir" / "m.bin").read_bytes() == b"weights"


def test_upload_write_read_exists_delete_on_s3(tmp_path, storage_connections, object_store):
    bucket = object_store.bucket()
    hook = make_hook(tmp_path)
    src = tmp_path / "model"
    (src / "sub").mkdir(parents=True)
    (src / "model.pt").write_bytes(os.urandom(10_000))
    (src / "sub" / "vocab.txt").write_text("a b c")

    stats = hook.upload_dir(str(src), f"s3://{bucket}/out/model")
    assert (stats.files, stats.bytes) == (2, 10_005)
    assert object_store.keys(bucket) == ["out/model/model.pt", "out/model/sub/vocab.txt"]
    assert object_store.get(bucket, "out/model/model.pt") == (src / "model.pt").read_bytes()

    hook.upload_file(str(src / "sub" / "vocab.txt"), f"s3://{bucket}/single/")
    assert object_store.get(bucket, "single/vocab.txt") == b"a b c"

    hook.write_bytes(f"s3://{bucket}/meta/result.json", b'{"ok": true}')
    assert hook.read_bytes(f"s3://{bucket}/meta/result.json") == b'{"ok": true}'
    assert hook.exists(f"s3://{bucket}/meta/result.json")
    assert hook.exists(f"s3://{bucket}/out/model")  # a prefix exists when it has objects
    assert not hook.exists(f"s3://{bucket}/meta/missing.json")

    assert hook.delete(f"s3://{bucket}/out/model/") == 2
    assert hook.delete(f"s3://{bucket}/meta/result.json") == 1
    assert object_store.keys(bucket) == ["single/vocab.txt"]
    with pytest.raises(StorageError, match="whole bucket"):
        hook.delete(f"s3://{bucket}/")


# -- cos:// with its own connection and endpoint ------------------------------------------------------------------


def test_cos_uses_cos_default_and_its_own_endpoint(tmp_path, storage_connections, object_store, s3_proxy, cos_proxy):
    bucket = object_store.bucket("cos")
    object_store.put(bucket, "code/train.py", b"print('hi')")
    hook = make_hook(tmp_path)

    hook.download(f"cos://{bucket}/code/", str(tmp_path / "code"))
    hook.upload_file(str(tmp_path / "code" / "train.py"), f"cos://{bucket}/copy/train.py")

    assert (tmp_path / "code" / "train.py").read_bytes() == b"print('hi')"
    assert object_store.get(bucket, "copy/train.py") == b"print('hi')"
    assert s3_proxy.snapshot() == []  # nothing went to the aws_default endpoint
    puts = [r for r in cos_proxy.snapshot() if r["method"] == "PUT"]
    assert object_gets(cos_proxy) and puts
    # boto3's default CRC32 trailer (an aws-chunked body) is refused by some COS/OSS/OBS endpoints: none is sent.
    assert not [h for r in puts for h in r["headers"] if h.startswith(("x-amz-checksum-", "x-amz-trailer"))], puts
    assert hook.connection_id("cos") == "cos_default"


def test_named_connection_overrides_the_scheme_default(tmp_path, storage_connections, object_store):
    bucket = object_store.bucket("cos")
    object_store.put(bucket, "x.txt", b"x")
    hook = make_hook(tmp_path, connections={"cos": "my_cos"})
    assert hook.connection_id(f"cos://{bucket}/x.txt") == "my_cos"
    assert hook.read_bytes(f"cos://{bucket}/x.txt") == b"x"

    missing = make_hook(tmp_path, connections={"cos": "nowhere"})
    with pytest.raises(StorageError) as info:
        missing.read_bytes(f"cos://{bucket}/x.txt")
    assert "'nowhere'" in str(info.value) and f"cos://{bucket}/x.txt" in str(info.value)
    assert "AIRFLOW_CONN_NOWHERE" in str(info.value)

    with pytest.raises(StorageError, match="unknown scheme 'gcs'"):
        ObjectStorageHook(connections={"gcs": "x"})


# -- local paths --------------------------------------------------------------------------------------------------


def test_local_paths_work_like_buckets(tmp_path):
    hook = make_hook(tmp_path)
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "nested" / "b.txt").write_text("BB")
    os.chmod(src / "a.txt", 0o755)

    assert [o.relative_path for o in hook.list_objects(str(src))] == ["a.txt", "nested/b.txt"]
    assert hook.list_objects(str(src / "a.txt"))[0].last_modified == os.stat(src / "a.txt").st_mtime
    assert hook.is_prefix(str(src)) and not hook.is_prefix(str(src / "a.txt"))
    stats = hook.download(f"file://{src}", str(tmp_path / "copy"))
    assert (stats.files, stats.bytes) == (2, 3)
    assert (tmp_path / "copy" / "nested" / "b.txt").read_text() == "BB"
    assert os.access(tmp_path / "copy" / "a.txt", os.X_OK)

    hook.upload_dir(str(src), str(tmp_path / "shared" / "out"))
    assert (tmp_path / "shared" / "out" / "nested" / "b.txt").read_text() == "BB"
    hook.upload_file(str(src / "a.txt"), str(tmp_path / "shared") + "/")
    assert (tmp_path / "shared" / "a.txt").read_text() == "A"
    hook.write_bytes(str(tmp_path / "shared" / "deep" / "r.json"), b"{}")
    assert hook.read_bytes(f"file://{tmp_path}/shared/deep/r.json") == b"{}"
    assert hook.exists(str(tmp_path / "shared" / "deep" / "r.json"))
    leftovers = [p for p in (tmp_path / "shared").rglob("*") if ".part-" in p.name]
    assert leftovers == []
    assert hook.delete(str(tmp_path / "shared" / "out")) == 2
    assert not hook.exists(str(tmp_path / "shared" / "out"))
    with pytest.raises(StorageError, match="nothing to download"):
        hook.download(str(tmp_path / "missing"), str(tmp_path / "x"))


# -- multipart ----------------------------------------------------------------------------------------------------


def test_multipart_upload_and_ranged_download_are_verified(tmp_path, storage_connections, object_store, s3_proxy):
    # s3transfer never uploads parts smaller than 5 MiB (the S3 minimum), so the object is 11 MiB.
    hook = make_hook(tmp_path, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, transfer_concurrency=4)
    bucket = object_store.bucket()
    big = tmp_path / "big.bin"
    data = os.urandom(11 * MiB)
    big.write_bytes(data)

    hook.upload_file(str(big), f"s3://{bucket}/big.bin")

    parts = [r for r in s3_proxy.snapshot() if r["method"] == "PUT" and "partNumber=" in r["query"]]
    assert len(parts) == 3
    assert [r for r in s3_proxy.snapshot() if r["method"] == "POST" and "uploads" in r["query"]]
    etag = object_store.head(bucket, "big.bin")["ETag"].strip('"')
    assert etag.endswith("-3")  # a multipart ETag: only the size can be checked against it
    s3_proxy.reset()

    hook.download(f"s3://{bucket}/big.bin", str(tmp_path / "back.bin"))

    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
    assert len(object_gets(s3_proxy)) == 3  # three ranged GETs of 5 MiB, 5 MiB, 1 MiB
    assert sum(r["bytes_out"] for r in object_gets(s3_proxy)) == len(data)


def test_corrupted_transfer_is_caught_by_the_md5_check(tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    object_store.put(bucket, "data/x.bin", os.urandom(4096))
    hook = make_hook(tmp_path)
    s3_proxy.corrupt_object_bodies = True
    with pytest.raises(StorageError) as info:
        hook.download(f"s3://{bucket}/data/", str(tmp_path / "out"))
    assert f"s3://{bucket}/data/x.bin" in str(info.value) and "MD5" in str(info.value)
    assert list((tmp_path / "out").iterdir()) == []  # the bad file never got its final name


# -- keys that escape ---------------------------------------------------------------------------------------------


def test_listed_key_with_dotdot_is_refused(tmp_path, set_aws_connection, moto_s3):
    # moto, not MinIO: MinIO (like most real stores) refuses to store a key with '..' segments at all, but a
    # listing is input we do not control (S3 itself stores such keys), so the hook must refuse it when listed.
    import boto3

    set_aws_connection("aws_default", "moto", "moto-secret", moto_s3.url)
    raw = boto3.client("s3", endpoint_url=moto_s3.url, region_name="us-east-1", aws_access_key_id="moto",
                       aws_secret_access_key="moto-secret")
    bucket = "dotdot-" + os.urandom(4).hex()
    raw.create_bucket(Bucket=bucket)
    raw.put_object(Bucket=bucket, Key="chan/ok.txt", Body=b"ok")
    raw.put_object(Bucket=bucket, Key="chan/../../evil.txt", Body=b"evil")
    hook = make_hook(tmp_path)
    with pytest.raises(StorageError) as info:
        hook.download(f"s3://{bucket}/chan/", str(tmp_path / "out"))
    message = str(info.value)
    assert "chan/../../evil.txt" in message and "'..'" in message and f"s3://{bucket}/chan/" in message
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.txt").exists()


# -- errors -------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_endpoint_gives_one_line_naming_uri_and_connection(tmp_path, set_aws_connection, s3_server):
    endpoint = f"http://127.0.0.1:{_free_port()}"
    set_aws_connection("cos_down", s3_server.access_key, s3_server.secret_key, endpoint)
    hook = make_hook(tmp_path, connections={"cos": "cos_down"})
    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        hook.download("cos://bucket/data/", str(tmp_path / "out"))
    message = str(info.value)
    # Connection refused is retried like a reset (storage.retries: 10 attempts, jittered backoff of 50 ms * 2^n):
    # at most ~26 s of backoff in all, ~13 s on average. What must not happen is a hang of minutes.
    assert time.monotonic() - started < 45
    assert "\n" not in message
    assert message.startswith("cannot reach cos://bucket/data/ via connection 'cos_down'")
    assert endpoint in message and "connection refused" in message and "endpoint_url" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no stack of botocore internals


@pytest.mark.parametrize(
    ("access_key", "expected_code"), [(None, "SignatureDoesNotMatch"), ("AKIAUNKNOWNKEY000000", "InvalidAccessKeyId")]
)
def test_wrong_credentials_give_one_line_and_never_show_the_secret(
    tmp_path, set_aws_connection, s3_server, s3_proxy, object_store, caplog, capfd, access_key, expected_code
):
    bucket = object_store.bucket()
    object_store.put(bucket, "data/x.txt", b"x")
    wrong_secret = "WRONGsecretKEY/abcdefghijklmnopqrstuvwxyz0123"
    set_aws_connection("bad_creds", access_key or s3_server.access_key, wrong_secret, s3_proxy.url)
    set_aws_connection("aws_default", s3_server.access_key, s3_server.secret_key, s3_proxy.url)
    caplog.set_level(logging.DEBUG)

    good = make_hook(tmp_path)
    good.download(f"s3://{bucket}/data/", str(tmp_path / "ok"))  # a working transfer, logged at DEBUG
    bad = make_hook(tmp_path, connections={"s3": "bad_creds"})
    with pytest.raises(StorageError) as info:
        bad.list_objects(f"s3://{bucket}/data/")

    message = str(info.value)
    assert message.startswith(f"access denied to s3://{bucket}/data/ via connection 'bad_creds'")
    assert expected_code in message and "check the credentials" in message and "\n" not in message
    captured = capfd.readouterr()
    everything = "\n".join([message, caplog.text, captured.out, captured.err])
    assert "s3://" in caplog.text or "s3://" in captured.out  # the logs were captured at all
    for secret in (wrong_secret, s3_server.secret_key):
        assert secret not in everything


def test_missing_bucket_and_object_messages(tmp_path, storage_connections, object_store):
    hook = make_hook(tmp_path)
    with pytest.raises(StorageError) as info:
        hook.download("s3://no-such-bucket-here/data/", str(tmp_path / "x"))
    assert "no such bucket 'no-such-bucket-here'" in str(info.value) and "'aws_default'" in str(info.value)
    bucket = object_store.bucket()
    with pytest.raises(StorageError) as info:
        hook.read_bytes(f"s3://{bucket}/missing.json")
    assert str(info.value).startswith(f"no such object s3://{bucket}/missing.json via connection 'aws_default'")
    with pytest.raises(StorageError, match="nothing to download"):
        hook.download(f"s3://{bucket}/empty/", str(tmp_path / "x"))


# -- progress -----------------------------------------------------------------------------------------------------


def test_long_transfer_logs_progress_lines_but_not_one_per_object(tmp_path, storage_connections, object_store, s3_proxy, caplog):
    bucket = object_store.bucket()
    count = 24
    for i in range(count):
        object_store.put(bucket, f"many/{i:03d}.bin", os.urandom(32 * 1024))
    hook = make_hook(tmp_path, transfer_concurrency=6, progress_interval=0.2)
    s3_proxy.throttle_bytes_per_s = 128 * 1024  # each object takes ~0.25 s, the whole transfer ~1 s
    caplog.set_level(logging.INFO, logger="operators.storage.hook")

    hook.download(f"s3://{bucket}/many/", str(tmp_path / "many"))

    lines = [r.getMessage() for r in caplog.records if r.name == "operators.storage.hook"]
    progress = [line for line in lines if "files," in line and "/s" in line and ": done" not in line]
    assert 2 <= len(progress) < count, lines
    assert any("ETA" in line for line in progress)
    assert lines[-1].endswith("/s)") and f"done, {count} files" in lines[-1]
    assert len(list((tmp_path / "many").iterdir())) == count


def test_cos_connection_without_endpoint_is_refused_up_front(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_COS_NO_ENDPOINT",
        '{"conn_type": "aws", "login": "AKIAEXAMPLE", "password": "secret-value-123", "extra": {"region_name": "ap-guangzhou"}}',
    )
    hook = make_hook(tmp_path, connections={"cos": "cos_no_endpoint"})
    with pytest.raises(StorageError) as info:
        hook.list_objects("cos://bucket/data/")
    assert "'cos_no_endpoint'" in str(info.value) and "no endpoint_url" in str(info.value)
    assert "secret-value-123" not in str(info.value)


def test_split_listing_gives_the_same_objects_whatever_changed_since_the_hint(storage_connections, object_store):
    from operators.storage.hook import ObjectStorageHook

    bucket = object_store.bucket()
    for i in range(0, 60, 2):
        object_store.put(bucket, f"data/k{i:03d}", b"x" * i)
    hook = ObjectStorageHook()
    uri = f"s3://{bucket}/data/"
    hints = [f"data/k{i:03d}" for i in (10, 30, 50)]  # cut points remembered from an earlier listing
    object_store.put(bucket, "data/k031", b"new")  # added inside a range
    object_store.client.delete_object(Bucket=bucket, Key="data/k030")  # a cut point itself is gone
    object_store.put(bucket, "data/k058", b"changed")  # overwritten
    plain = hook.describe(uri)
    split = hook.describe(uri, split_after=hints)
    assert [(o.key, o.size, o.etag) for o in split.objects] == [(o.key, o.size, o.etag) for o in plain.objects]
    keys = [o.key for o in split.objects]
    assert "data/k031" in keys and "data/k030" not in keys and len(keys) == len(set(keys)) == 30


# -- what a real store does: listing pages, odd keys, multipart ETags -----------------------------------------------


def test_listing_above_1000_keys_takes_two_pages_and_downloads_every_object(tmp_path, storage_connections, many_objects, s3_proxy):
    hook = make_hook(tmp_path, transfer_concurrency=8)

    hook.download(many_objects.uri, str(tmp_path / "out"))

    pages = listings(s3_proxy)
    assert len(pages) == 2  # the server returns at most 1,000 keys per page
    assert "continuation-token=" in pages[1]["query"]
    got = {str(p.relative_to(tmp_path / "out")): p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert got == many_objects.files
    assert len(object_gets(s3_proxy)) == 1100


ODD_KEYS = {
    "a b/c d.txt": b"spaces",
    "ünïcødé/日本語 データ.csv": "ü,日本".encode(),
    "symbols/100% + #1 & (copy) = ok?.txt": b"reserved characters",
    "emoji/🚀 launch.json": b'{"go": true}',
}


def test_keys_with_spaces_and_unicode_round_trip(tmp_path, storage_connections, object_store):
    hook = make_hook(tmp_path)
    bucket = object_store.bucket()
    src = tmp_path / "src"
    for rel, data in ODD_KEYS.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)

    hook.upload_dir(str(src), f"s3://{bucket}/odd dir/")

    assert object_store.keys(bucket) == sorted(f"odd dir/{rel}" for rel in ODD_KEYS)
    hook.download(f"s3://{bucket}/odd dir/", str(tmp_path / "back"))
    for rel, data in ODD_KEYS.items():
        assert (tmp_path / "back" / rel).read_bytes() == data
    single = f"s3://{bucket}/odd dir/ünïcødé/日本語 データ.csv"
    assert hook.exists(single) and hook.read_bytes(single) == "ü,日本".encode()
    hook.write_bytes(f"s3://{bucket}/new/ä ö ü.txt", b"written")
    assert object_store.get(bucket, "new/ä ö ü.txt") == b"written"
    assert hook.delete(f"s3://{bucket}/odd dir/") == len(ODD_KEYS)
    assert object_store.keys(bucket, "odd dir/") == []


def test_multipart_object_from_another_client_downloads_with_its_multipart_etag(tmp_path, storage_connections, object_store, s3_proxy):
    # Uploaded by plain boto3 in 5 MiB parts (as awscli or a training script would): the server's ETag is
    # "<md5 of part md5s>-3", which is not the content's MD5; our download checks the size, ranges with If-Match.
    from boto3.s3.transfer import TransferConfig

    bucket = object_store.bucket()
    data = os.urandom(12 * MiB + 123)
    (tmp_path / "src.bin").write_bytes(data)
    object_store.client.upload_file(
        str(tmp_path / "src.bin"), bucket, "models/weights.bin",
        Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB),
    )
    etag = object_store.head(bucket, "models/weights.bin")["ETag"].strip('"')
    assert etag.endswith("-3") and etag.split("-")[0] != hashlib.md5(data).hexdigest()
    hook = make_hook(tmp_path, multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, transfer_concurrency=4)

    hook.download(f"s3://{bucket}/models/", str(tmp_path / "out"))

    assert (tmp_path / "out" / "weights.bin").read_bytes() == data
    gets = object_gets(s3_proxy)
    assert len(gets) >= 2 and sum(r["bytes_out"] for r in gets) == len(data)  # ranged, every byte once


def test_a_failed_small_object_cancels_a_large_download_in_flight_with_the_real_error(tmp_path, storage_connections, object_store, s3_proxy):
    # The large object goes through s3transfer (ranged GETs), the small one through our workers; the small one's
    # MD5 check fails. Regression: cancelling the TransferManager used to raise s3transfer's
    # "TypeError: 'str' object is not callable" instead of the MD5 error.
    from boto3.s3.transfer import TransferConfig

    bucket = object_store.bucket()
    (tmp_path / "large.bin").write_bytes(os.urandom(12 * MiB))
    object_store.client.upload_file(str(tmp_path / "large.bin"), bucket, "mixed/a-large.bin",
                                    Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    object_store.put(bucket, "mixed/b-small.bin", os.urandom(4096))
    hook = make_hook(tmp_path, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, transfer_concurrency=2)
    s3_proxy.corrupt_object_bodies = True  # the multipart object's ETag is no MD5: only the small one notices
    s3_proxy.throttle_bytes_per_s = MiB // 2  # the large one would take ~24 s

    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        hook.download(f"s3://{bucket}/mixed/", str(tmp_path / "out"))

    assert "mixed/b-small.bin" in str(info.value) and "MD5" in str(info.value)
    assert time.monotonic() - started < 12  # the large transfer was cancelled, not waited for
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []  # no partial or temp files

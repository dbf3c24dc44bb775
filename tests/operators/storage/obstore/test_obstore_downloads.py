"""obstore as RemoteStore's download engine: against the real S3 server (MinIO behind the counting proxy).

The fault-injection suites (tests/integration/test_storage_faults*.py) run the same downloads through 503s, resets,
truncated bodies and stalls; these tests pin what the engine must carry over from the connection and the botocore
path: conditional GETs, ranged large objects, identical bytes, the same error lines, and the cases kept on botocore.
"""

from __future__ import annotations

import hashlib
import logging
import os

import pytest

from operators.settings import TrainingSettings
from operators.storage.hook import ObjectStorageHook, StorageError, parse_uri
from operators.storage.obstore.store import obstore_settings
from operators.storage.remote import make_remote

MiB = 1024 * 1024


def make_hook(tmp_path, **settings) -> ObjectStorageHook:
    return ObjectStorageHook(settings=TrainingSettings(workspace=str(tmp_path / "ws"), **settings))


def object_gets(proxy) -> list[dict]:
    return [r for r in proxy.object_requests() if r["method"] == "GET"]


def digests(root) -> dict[str, str]:
    return {
        os.path.relpath(os.path.join(d, f), root): hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
        for d, _, files in os.walk(root) for f in files
    }


def test_a_mixed_channel_downloads_through_obstore_with_conditional_and_ranged_gets(
        tmp_path, s3_proxy, object_store, storage_connections):
    bucket = object_store.bucket()
    sent = {f"ch/small/{i:03d}.bin": os.urandom(16 * 1024 + i) for i in range(20)}
    sent["ch/empty.bin"] = b""
    sent["ch/large/model.bin"] = os.urandom(13 * MiB + 7)  # not a multiple of the range size
    for key, data in sent.items():
        object_store.put(bucket, key, data)
    hook = make_hook(tmp_path, multipart_threshold=4 * MiB, multipart_chunksize=4 * MiB, transfer_concurrency=4)

    stats = hook.download(f"s3://{bucket}/ch/", str(tmp_path / "out"))

    assert stats.files == len(sent)
    expected = {key[len("ch/"):]: hashlib.sha256(data).hexdigest() for key, data in sent.items()}
    assert digests(tmp_path / "out") == expected
    gets = object_gets(s3_proxy)
    assert gets and all("botocore" not in r["headers"].get("user-agent", "") for r in gets), \
        "the downloads were not made by obstore"
    assert all(r["headers"].get("if-match") for r in gets if not r["path"].endswith("empty.bin")), \
        "every GET must be conditional on the listed ETag"
    ranged = [r for r in gets if r["path"].endswith("model.bin")]
    assert len(ranged) >= 2 and all(r["headers"].get("range", "").startswith("bytes=") for r in ranged)
    assert not [name for name in os.listdir(tmp_path / "out" / "large") if name.startswith(".")], "temp files left"


def test_an_object_changed_after_listing_fails_as_changed_and_leaves_nothing(
        tmp_path, s3_proxy, object_store, storage_connections):
    bucket = object_store.bucket()
    object_store.put(bucket, "d/a.bin", os.urandom(2048))
    object_store.put(bucket, "d/big.bin", os.urandom(9 * MiB))
    hook = make_hook(tmp_path, multipart_threshold=4 * MiB, multipart_chunksize=4 * MiB)
    listing = hook.describe(f"s3://{bucket}/d/")
    object_store.put(bucket, "d/big.bin", os.urandom(9 * MiB))  # a new version between listing and download

    with pytest.raises(StorageError) as info:
        hook.download_listing(listing, str(tmp_path / "out"))

    assert f"s3://{bucket}/d/big.bin changed while it was being downloaded via connection 'aws_default'" \
        in str(info.value)
    assert not (tmp_path / "out" / "big.bin").exists()
    assert not [n for n in os.listdir(tmp_path / "out") if n.startswith(".")], "temp files left"


def test_a_store_that_throttles_for_good_is_named_as_throttling(
        tmp_path, s3_proxy, s3_server, object_store, set_aws_connection):
    bucket = object_store.bucket()
    object_store.put(bucket, "t/a.bin", b"x" * 100)
    set_aws_connection("aws_default", s3_server.access_key, s3_server.secret_key, s3_proxy.url,
                       config_kwargs={"retries": {"mode": "standard", "max_attempts": 1}})
    hook = make_hook(tmp_path)
    listing = hook.describe(f"s3://{bucket}/t/")
    s3_proxy.fail_requests(503, "SlowDown", -1)

    with pytest.raises(StorageError) as info:
        hook.download_listing(listing, str(tmp_path / "out"))

    message = str(info.value)
    assert "the store is throttling requests (SlowDown 503) and still was after 2 attempts" in message, message
    assert s3_server.secret_key not in message


@pytest.mark.parametrize("style, endpoint, virtual", [
    ("virtual", "http://bkt-1.s3.example.test:9000", True),
    ("path", "http://s3.example.test:9000", False),
])
def test_the_connection_addressing_style_and_region_reach_obstore(set_aws_connection, style, endpoint, virtual):
    set_aws_connection("my_store", "AKIDEXAMPLE", "secret-example", "http://s3.example.test:9000",
                       region="ap-guangzhou", addressing_style=style)
    remote = make_remote(parse_uri("cos://bkt-1/x"), "my_store", 4)

    settings = obstore_settings(remote, "bkt-1")

    assert settings is not None
    assert (settings.endpoint, settings.virtual_hosted, settings.region) == (endpoint, virtual, "ap-guangzhou")
    frozen = settings.credentials.get_frozen_credentials()
    assert (frozen.access_key, frozen.secret_key) == ("AKIDEXAMPLE", "secret-example")


@pytest.mark.parametrize("extra", [
    {"verify": False},
    {"config_kwargs": {"proxies": {"https": "http://proxy.example.test:3128"}}},
])
def test_connections_obstore_cannot_serve_as_botocore_does_stay_on_botocore(set_aws_connection, extra):
    set_aws_connection("my_store", "AKIDEXAMPLE", "secret-example", "https://s3.example.test", **extra)
    remote = make_remote(parse_uri("s3://bkt-1/x"), "my_store", 4)
    logger = logging.getLogger("operators.storage.hook")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # Airflow reconfigures logging when it reads a connection: a handler of our own
    logger.addHandler(handler)
    old_level, logger.level = logger.level, logging.INFO
    try:
        assert obstore_settings(remote, "bkt-1") is None
    finally:
        logger.removeHandler(handler)
        logger.level = old_level

    assert any("downloads via connection 'my_store' go through botocore: the connection" in r.getMessage()
               for r in records)


@pytest.mark.parametrize("status, code", [(503, "SlowDown"), (429, "TooManyRequests")])
def test_a_store_shedding_load_for_a_while_is_ridden_out(tmp_path, s3_proxy, object_store, storage_connections,
                                                         status, code):
    bucket = object_store.bucket()
    data = os.urandom(5000)
    object_store.put(bucket, "s/a.bin", data)
    hook = make_hook(tmp_path)
    listing = hook.describe(f"s3://{bucket}/s/")
    s3_proxy.fail_requests(status, code, 3)

    hook.download_listing(listing, str(tmp_path / "out"))

    assert (tmp_path / "out" / "a.bin").read_bytes() == data
    assert len(object_gets(s3_proxy)) == 4  # three refused, the fourth served


def test_a_connection_that_signs_with_sigv2_stays_on_botocore(set_aws_connection):
    # config_kwargs signature_version "s3" (SigV2, which some older stores want): obstore signs with SigV4 only.
    set_aws_connection("old_store", "AKIDEXAMPLE", "secret-example", "http://s3.example.test:9000",
                       config_kwargs={"signature_version": "s3"})
    remote = make_remote(parse_uri("s3://bkt-1/x"), "old_store", 4)

    assert obstore_settings(remote, "bkt-1") is None

    set_aws_connection("new_store", "AKIDEXAMPLE", "secret-example", "http://s3.example.test:9000",
                       config_kwargs={"signature_version": "s3v4"})
    assert obstore_settings(make_remote(parse_uri("s3://bkt-1/x"), "new_store", 4), "bkt-1") is not None


def test_a_large_single_part_object_is_md5_checked_as_its_ranges_arrive_not_read_again(
        tmp_path, s3_proxy, object_store, storage_connections, monkeypatch):
    """An object of one PUT (an MD5 ETag, no stored CRC) above the multipart threshold comes in ranges out of order;
    its MD5 is fed range by range as the written prefix grows, so the file is not read whole again at the end."""
    from operators.storage import transfers

    bucket = object_store.bucket()
    data = os.urandom(13 * MiB + 7)
    object_store.put(bucket, "d/model.bin", data)
    hook = make_hook(tmp_path, multipart_threshold=4 * MiB, multipart_chunksize=4 * MiB, transfer_concurrency=4)
    assert "-" not in hook.describe(f"s3://{bucket}/d/model.bin").objects[0].etag  # one PUT: its ETag is its MD5

    def no_second_read(path):
        raise AssertionError(f"{path} was read again to compute its MD5")

    monkeypatch.setattr(transfers, "md5_file", no_second_read)
    hook.download(f"s3://{bucket}/d/", str(tmp_path / "out"))

    assert (tmp_path / "out" / "model.bin").read_bytes() == data
    assert len([r for r in object_gets(s3_proxy) if r["path"].endswith("model.bin")]) == 4  # ranged


def test_a_corrupted_range_of_a_large_single_part_object_fails_its_md5_and_leaves_nothing(
        tmp_path, s3_proxy, object_store, storage_connections):
    bucket = object_store.bucket()
    object_store.put(bucket, "d/model.bin", os.urandom(9 * MiB))
    hook = make_hook(tmp_path, multipart_threshold=4 * MiB, multipart_chunksize=4 * MiB, transfer_concurrency=4)
    s3_proxy.corrupt_object_bodies = True

    with pytest.raises(StorageError) as info:
        hook.download(f"s3://{bucket}/d/", str(tmp_path / "out"))

    assert f"downloaded s3://{bucket}/d/model.bin has MD5" in str(info.value) and "corrupted" in str(info.value)
    assert os.listdir(tmp_path / "out") == []  # neither the file nor its temp

"""The botocore engine's transfers with the store's own checksums (storage.checksums; storage.remote's handlers,
botocore.downloads, botocore.uploads, botocore.stream), against the real S3 server (MinIO behind the counting
proxy): uploads store a full-object CRC64NVME, sent in a header and never in an aws-chunked trailer; downloads are
verified by it instead of MD5; objects without one still by MD5; a store that refuses checksum headers still gets
its uploads."""

from __future__ import annotations

import logging
import os

import pytest

from operators.settings import TrainingSettings
from operators.storage import checksums
from operators.storage.hook import ObjectStorageHook, StorageError, parse_uri
from operators.storage.progress import TransferProgress

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def on_botocore(monkeypatch):
    """Every bucket on the botocore engine (obstore reaches MinIO, so it would be chosen otherwise)."""
    monkeypatch.setattr("operators.storage.obstore.store.obstore_settings", lambda remote, bucket: None)


def make_hook(tmp_path) -> ObjectStorageHook:
    settings = TrainingSettings(workspace=str(tmp_path / "ws"), multipart_threshold=5 * MiB,
                                multipart_chunksize=5 * MiB, transfer_concurrency=4)
    return ObjectStorageHook(settings=settings)


def stored_checksum(object_store, bucket: str, key: str) -> dict[str, str]:
    head = object_store.client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    return {k: v for k, v in head["ResponseMetadata"]["HTTPHeaders"].items() if k.startswith("x-amz-checksum-")}


def write_tree(root, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_a_round_trip_stores_crc64nvme_in_headers_and_verifies_the_download_without_md5(
        tmp_path, storage_connections, object_store, s3_proxy, md5_calls):
    bucket = object_store.bucket()
    sent = {"small/a.bin": os.urandom(300_000), "small/b.bin": os.urandom(1000), "large.bin": os.urandom(11 * MiB + 5)}
    write_tree(tmp_path / "src", sent)
    hook = make_hook(tmp_path)

    hook.upload_dir(str(tmp_path / "src"), f"s3://{bucket}/rt/")

    for name, data in sent.items():
        assert stored_checksum(object_store, bucket, f"rt/{name}") == {
            "x-amz-checksum-crc64nvme": checksums.CRC64NVME.encode(checksums.CRC64NVME.compute(data)),
            "x-amz-checksum-type": "FULL_OBJECT"}, name
    writes = [r for r in s3_proxy.snapshot() if r["method"] == "PUT"]
    assert writes and all("x-amz-checksum-crc64nvme" in r["headers"] for r in writes)
    assert not [r for r in writes if "x-amz-trailer" in r["headers"] or "aws-chunked" in
                r["headers"].get("content-encoding", "")], "a checksum went in an aws-chunked trailer"
    parts = sorted(r["bytes_in"] for r in writes if "partNumber=" in r["query"])
    assert parts == [1, MiB + 5, 5 * MiB, 5 * MiB], parts  # the probe's one byte (aborted), then the large file's parts
    assert object_store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    md5_calls.clear()
    hook.download(f"s3://{bucket}/rt/", str(tmp_path / "out"))

    assert {name: (tmp_path / "out" / name).read_bytes() for name in sent} == sent
    assert md5_calls == [], "the download computed MD5s although every object has a CRC64NVME"
    gets = [r for r in s3_proxy.snapshot() if r["method"] in ("GET", "HEAD") and r["path"].count("/") >= 2]
    assert gets and all(r["headers"].get("x-amz-checksum-mode") == "ENABLED" for r in gets)


def test_a_body_that_does_not_match_the_stores_checksum_is_refused_with_one_line(
        tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    data = os.urandom(200_000)
    object_store.client.put_object(Bucket=bucket, Key="c/a.bin", Body=data,
                                   ChecksumCRC64NVME=checksums.CRC64NVME.encode(checksums.CRC64NVME.compute(data)))
    s3_proxy.corrupt_object_bodies = True

    with pytest.raises(StorageError) as info:
        make_hook(tmp_path).download(f"s3://{bucket}/c/", str(tmp_path / "out"))

    message = str(info.value)
    assert message.startswith(f"downloaded s3://{bucket}/c/a.bin has CRC64NVME ")
    assert "but the store's is " in message and "\n" not in message
    assert not (tmp_path / "out" / "a.bin").exists()


def test_an_object_without_an_additional_checksum_is_still_verified_by_md5(
        tmp_path, storage_connections, object_store, s3_proxy, md5_calls):
    bucket = object_store.bucket()
    data = os.urandom(100_000)
    object_store.put(bucket, "p/plain.bin", data)  # no checksum: MinIO keeps none, its ETag is the MD5
    assert stored_checksum(object_store, bucket, "p/plain.bin") == {}

    md5_calls.clear()
    make_hook(tmp_path).download(f"s3://{bucket}/p/", str(tmp_path / "out"))
    assert (tmp_path / "out" / "plain.bin").read_bytes() == data
    assert md5_calls, "no MD5 verified the object"

    s3_proxy.corrupt_object_bodies = True
    with pytest.raises(StorageError, match=r"has MD5 [0-9a-f]{32} but its ETag is"):
        make_hook(tmp_path).download(f"s3://{bucket}/p/", str(tmp_path / "again"))


def test_a_large_object_is_checked_against_the_crc_of_its_multipart_upload(
        tmp_path, storage_connections, object_store, s3_proxy, md5_calls):
    bucket = object_store.bucket()
    data = os.urandom(12 * MiB)
    (tmp_path / "big.bin").write_bytes(data)
    hook = make_hook(tmp_path)
    hook.upload_file(str(tmp_path / "big.bin"), f"s3://{bucket}/l/big.bin")
    assert object_store.head(bucket, "l/big.bin")["ETag"].strip('"').endswith("-3")

    md5_calls.clear()
    hook.download(f"s3://{bucket}/l/big.bin", str(tmp_path / "out" / "big.bin"))
    assert (tmp_path / "out" / "big.bin").read_bytes() == data and md5_calls == []

    s3_proxy.corrupt_object_bodies = True  # the first byte of every ranged GET flipped
    with pytest.raises(StorageError, match=f"downloaded s3://{bucket}/l/big.bin has CRC64NVME .* but the store's is"):
        hook.download(f"s3://{bucket}/l/big.bin", str(tmp_path / "again" / "big.bin"))


def test_a_stream_uploaded_in_parts_stores_the_crc64nvme_of_everything_written(
        tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    chunks = [os.urandom(4 * MiB) for _ in range(3)]
    hook = make_hook(tmp_path)
    loc = parse_uri(f"s3://{bucket}/s/model.tar.gz")

    def produce(write) -> None:
        for chunk in chunks:
            write(chunk)

    size = hook.store(loc).upload_stream(loc, produce, TransferProgress("test", None, 1))

    data = b"".join(chunks)
    assert size == len(data) and object_store.get(bucket, "s/model.tar.gz") == data
    assert object_store.head(bucket, "s/model.tar.gz")["ETag"].strip('"').endswith("-3")
    assert stored_checksum(object_store, bucket, "s/model.tar.gz") == {
        "x-amz-checksum-crc64nvme": checksums.CRC64NVME.encode(checksums.CRC64NVME.compute(data)),
        "x-amz-checksum-type": "FULL_OBJECT"}


def test_a_store_that_refuses_checksum_headers_still_gets_the_uploads_verified_by_md5(
        tmp_path, storage_connections, object_store, s3_proxy, caplog):
    bucket = object_store.bucket()
    sent = {"a.bin": os.urandom(5000), "big.bin": os.urandom(6 * MiB)}
    write_tree(tmp_path / "src", sent)
    s3_proxy.refuse_checksum_headers = True
    hook = make_hook(tmp_path)

    with caplog.at_level(logging.WARNING, logger="operators.storage.hook"):
        hook.upload_dir(str(tmp_path / "src"), f"s3://{bucket}/r/")
        hook.upload_file(str(tmp_path / "src" / "a.bin"), f"s3://{bucket}/r/again.bin")

    assert {key: object_store.get(bucket, key) for key in object_store.keys(bucket)} == {
        "r/a.bin": sent["a.bin"], "r/big.bin": sent["big.bin"], "r/again.bin": sent["a.bin"]}
    refusals = [r.getMessage() for r in caplog.records if "store no CRC64NVME checksum" in r.getMessage()]
    assert len(refusals) == 1, refusals  # once per bucket of the connection
    assert "it refused them (InvalidArgument)" in refusals[0]
    assert stored_checksum(object_store, bucket, "r/a.bin") == {}
    assert object_store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

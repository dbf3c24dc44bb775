"""The obstore engine's transfers with CRC64NVME instead of MD5 (storage.checksums; obstore.uploads, obstore.downloads),
against the real S3 server (MinIO behind the counting proxy). obstore can neither send the store's x-amz-checksum-*
headers nor read them from a response, so its uploads record the CRC64NVME in the object's user metadata
(x-amz-meta-crc64nvme), and its downloads verify with that copy: small objects as they are written, large ones from
their ranges' CRCs combined."""

from __future__ import annotations

import os

import pytest

from operators.settings import TrainingSettings
from operators.storage import checksums
from operators.storage.hook import ObjectStorageHook, StorageError

MiB = 1024 * 1024


def make_hook(tmp_path) -> ObjectStorageHook:
    settings = TrainingSettings(workspace=str(tmp_path / "ws"), multipart_threshold=5 * MiB,
                                multipart_chunksize=5 * MiB, transfer_concurrency=4)
    return ObjectStorageHook(settings=settings)


def crc(data: bytes) -> str:
    return checksums.CRC64NVME.encode(checksums.CRC64NVME.compute(data))


def test_a_round_trip_records_the_crc64nvme_and_verifies_the_download_with_it_not_md5(
        tmp_path, storage_connections, object_store, s3_proxy, md5_calls):
    bucket = object_store.bucket()
    sent = {"a.bin": os.urandom(300_000), "empty.bin": b"", "large.bin": os.urandom(12 * MiB + 3)}
    (tmp_path / "src").mkdir()
    for name, data in sent.items():
        (tmp_path / "src" / name).write_bytes(data)
    hook = make_hook(tmp_path)

    hook.upload_dir(str(tmp_path / "src"), f"s3://{bucket}/rt/")

    writes = [r for r in s3_proxy.snapshot() if r["method"] in ("PUT", "POST")]
    assert writes and all("botocore" not in r["headers"].get("user-agent", "") for r in writes)
    for name, data in sent.items():  # the multipart upload of large.bin too (sent when it started)
        assert object_store.head(bucket, f"rt/{name}")["Metadata"] == {"crc64nvme": crc(data)}, name

    md5_calls.clear()
    hook.download(f"s3://{bucket}/rt/", str(tmp_path / "out"))

    assert {name: (tmp_path / "out" / name).read_bytes() for name in sent} == sent
    assert md5_calls == [], "the download computed MD5s although every object records its CRC64NVME"
    assert len([r for r in s3_proxy.snapshot() if r["method"] == "GET" and r["path"].endswith("large.bin")]) >= 2


@pytest.mark.parametrize("size", [200_000, 12 * MiB], ids=["one GET", "ranged"])
def test_a_body_that_does_not_match_its_recorded_crc_is_refused_with_one_line(
        tmp_path, storage_connections, object_store, s3_proxy, size):
    bucket = object_store.bucket()
    data = os.urandom(size)
    object_store.client.put_object(Bucket=bucket, Key="c/a.bin", Body=data, Metadata={"crc64nvme": crc(data)})
    s3_proxy.corrupt_object_bodies = True

    with pytest.raises(StorageError) as info:
        make_hook(tmp_path).download(f"s3://{bucket}/c/", str(tmp_path / "out"))

    message = str(info.value)
    assert message.startswith(f"downloaded s3://{bucket}/c/a.bin has CRC64NVME ")
    assert f"but the one its upload recorded (x-amz-meta-crc64nvme) is {crc(data)}" in message and "\n" not in message
    assert not (tmp_path / "out" / "a.bin").exists()


def test_an_object_without_a_recorded_crc_is_still_verified_by_md5(
        tmp_path, storage_connections, object_store, s3_proxy, md5_calls):
    bucket = object_store.bucket()
    data = os.urandom(100_000)
    object_store.put(bucket, "p/plain.bin", data)

    md5_calls.clear()
    make_hook(tmp_path).download(f"s3://{bucket}/p/", str(tmp_path / "out"))
    assert (tmp_path / "out" / "plain.bin").read_bytes() == data
    assert md5_calls, "no MD5 verified the object"

    s3_proxy.corrupt_object_bodies = True
    with pytest.raises(StorageError, match=r"has MD5 [0-9a-f]{32} but its ETag is"):
        make_hook(tmp_path).download(f"s3://{bucket}/p/", str(tmp_path / "again"))

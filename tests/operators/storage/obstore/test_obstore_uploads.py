"""obstore as RemoteStore's upload engine (storage.obstore.uploads): against the real S3 server (MinIO behind the
counting proxy).

The fault-injection suites (tests/integration/test_storage_faults*.py, test_sdk_storage_faults.py) run the same
uploads through 503s, resets, truncated bodies and stalls, and lost CreateMultipartUpload / Complete responses;
these pin what the engine must carry over from the botocore path: identical bytes, multipart parts of the
configured size, no upload left open, verification of what landed, and no header COS/OSS/OBS would refuse.
"""

from __future__ import annotations

import hashlib
import logging
import os

import pytest

from operators.settings import TrainingSettings
from operators.storage.hook import ObjectStorageHook, StorageError

MiB = 1024 * 1024
# What botocore's SigV4 sends too, and the user metadata that carries a file's CRC64NVME (storage.checksums: every
# S3-compatible store keeps x-amz-meta-*); anything else x-amz-* (a checksum above all) is what COS/OSS/OBS may refuse.
AMZ_HEADERS_EVERY_STORE_TAKES = {"x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "x-amz-meta-crc64nvme"}


def make_hook(tmp_path, **settings) -> ObjectStorageHook:
    return ObjectStorageHook(settings=TrainingSettings(workspace=str(tmp_path / "ws"), **settings),
                             progress_interval=0.05)


def open_uploads(object_store, bucket: str) -> list:
    return object_store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) or []


def writes(proxy) -> list[dict]:
    return [r for r in proxy.snapshot() if r["method"] in ("PUT", "POST")]


def test_a_directory_goes_up_through_obstore_byte_identical_and_verified_without_a_listing(
        tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    src = tmp_path / "ckpt"
    (src / "shards").mkdir(parents=True)
    sent = {f"shards/{i:03d}.bin": os.urandom(20_000 + i) for i in range(30)}
    sent["empty.txt"] = b""
    sent["model.bin"] = os.urandom(8 * MiB * 2 + 12345)  # three parts of the configured 8 MiB, not obstore's 5 MiB
    for name, data in sent.items():
        (src / name).write_bytes(data)
    hook = make_hook(tmp_path, multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, transfer_concurrency=4)

    stats = hook.upload_dir(str(src), f"s3://{bucket}/out/")

    assert stats.files == len(sent)
    assert {key[len("out/"):]: object_store.get(bucket, key) for key in object_store.keys(bucket, "out/")} == sent
    requests = writes(s3_proxy)
    assert requests and all("botocore" not in r["headers"].get("user-agent", "") for r in requests), \
        "the uploads were not made by obstore"
    parts = [r for r in requests if "partNumber=" in r["query"]]
    assert sorted(r["bytes_in"] for r in parts) == [12345, 8 * MiB, 8 * MiB]
    etag = object_store.head(bucket, "out/model.bin")["ETag"].strip('"')
    assert etag.endswith("-3")
    # The small files are verified by the ETags their PUTs answered (their MD5s): no listing, no HEAD; the large
    # one by a HEAD (its size), then the safety net's ListMultipartUploads.
    reads = sorted((r["method"], r["path"][len(f"/{bucket}/"):], r["query"].split("&")[0])
                   for r in s3_proxy.snapshot() if r["method"] in ("GET", "HEAD"))
    assert reads == [("GET", "", "uploads"), ("HEAD", "out/model.bin", "")]
    assert open_uploads(object_store, bucket) == []


def test_uploads_send_no_checksum_or_other_amz_headers_beyond_signing(
        tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    (tmp_path / "small.bin").write_bytes(os.urandom(1000))
    (tmp_path / "big.bin").write_bytes(os.urandom(11 * MiB))
    hook = make_hook(tmp_path, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)

    hook.upload_file(str(tmp_path / "small.bin"), f"s3://{bucket}/h/small.bin")
    hook.upload_file(str(tmp_path / "big.bin"), f"s3://{bucket}/h/big.bin")

    sent = {name for r in writes(s3_proxy) for name in r["headers"] if name.startswith("x-amz-")}
    unknown = sent - AMZ_HEADERS_EVERY_STORE_TAKES
    assert sent and not unknown, f"headers a COS/OSS/OBS endpoint may refuse: {unknown}"
    assert not [r for r in writes(s3_proxy) if "content-md5" in r["headers"]]


def test_a_put_answered_with_another_etag_fails_with_one_line(tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    (tmp_path / "a.bin").write_bytes(os.urandom(4096))
    s3_proxy.corrupt_put_etags = True

    with pytest.raises(StorageError) as info:
        make_hook(tmp_path).upload_file(str(tmp_path / "a.bin"), f"s3://{bucket}/v/a.bin")

    assert str(info.value).startswith(f"uploaded s3://{bucket}/v/a.bin has ETag 000000")
    assert "but the local file has MD5" in str(info.value)


def test_a_failed_multipart_upload_is_aborted_by_obstore_itself_and_names_the_cause(
        tmp_path, storage_connections, object_store, s3_proxy, monkeypatch):
    # With our safety net (uploads.abort_leftover_uploads) switched off: object_store aborts what it started.
    from operators.storage.obstore import uploads as obstore_uploads

    bucket = object_store.bucket()
    (tmp_path / "big.bin").write_bytes(os.urandom(16 * MiB))
    monkeypatch.setattr(obstore_uploads, "abort_leftover_uploads", lambda *args, **kwargs: 0)
    refuse = s3_proxy._take_failure

    def refuse_parts(handler) -> bool:  # every part refused (the create and the abort pass): it cannot complete
        if handler.command == "PUT" and "partNumber=" in handler.path:
            s3_proxy.fail_requests(403, "AccessDenied", count=1)
        return refuse(handler)

    monkeypatch.setattr(s3_proxy, "_take_failure", refuse_parts)
    hook = make_hook(tmp_path, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, transfer_concurrency=1)

    with pytest.raises(StorageError) as info:
        hook.upload_file(str(tmp_path / "big.bin"), f"s3://{bucket}/out/big.bin")

    assert str(info.value).startswith(f"access denied to s3://{bucket}/out/big.bin") and info.value.permanent
    assert object_store.keys(bucket) == []
    assert open_uploads(object_store, bucket) == []
    assert [r for r in s3_proxy.snapshot() if r["method"] == "DELETE" and "uploadId=" in r["query"]], \
        "object_store did not abort the upload"


def test_a_large_upload_logs_progress_while_its_parts_go_up(tmp_path, storage_connections, object_store, caplog):
    bucket = object_store.bucket()
    data = os.urandom(40 * MiB)
    (tmp_path / "big.bin").write_bytes(data)
    hook = make_hook(tmp_path, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, transfer_concurrency=2)

    with caplog.at_level(logging.INFO, logger="operators.storage.hook"):
        hook.upload_file(str(tmp_path / "big.bin"), f"s3://{bucket}/p/big.bin")

    assert hashlib.md5(object_store.get(bucket, "p/big.bin")).digest() == hashlib.md5(data).digest()
    prefix = f"upload -> s3://{bucket}/p/big.bin: "
    lines = [r.getMessage()[len(prefix):] for r in caplog.records if r.getMessage().startswith(prefix)]
    assert [line for line in lines if "% " in line.replace("%)", "% ") and not line.startswith(("starting", "done"))], \
        f"no progress line between start and end: {lines}"


def test_small_files_held_in_memory_at_once_stay_within_the_budget(tmp_path, storage_connections, object_store,
                                                                   monkeypatch):
    # Each file below the multipart threshold is read whole and PUT: 16 workers on shards just under 8 MiB would
    # hold ~128 MiB. What the uploads hold at once stays within SMALL_FILE_BUDGET; every byte still lands.
    from operators.storage.obstore import uploads as obstore_uploads

    held, peak = [0], [0]
    real_read, real_put = obstore_uploads._read_and_hash, obstore_uploads._put_single

    def read(path):
        data, *hashes = real_read(path)
        held[0] += len(data)
        peak[0] = max(peak[0], held[0])
        return (data, *hashes)

    async def put(store, remote, loc, data, *args):
        try:
            return await real_put(store, remote, loc, data, *args)
        finally:
            held[0] -= len(data)

    monkeypatch.setattr(obstore_uploads, "_read_and_hash", read)
    monkeypatch.setattr(obstore_uploads, "_put_single", put)
    bucket = object_store.bucket()
    src = tmp_path / "shards"
    src.mkdir()
    sent = {f"shard-{i:02d}.bin": os.urandom(7 * MiB + i) for i in range(10)}
    for name, data in sent.items():
        (src / name).write_bytes(data)
    hook = make_hook(tmp_path, multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, transfer_concurrency=16)

    hook.upload_dir(str(src), f"s3://{bucket}/ckpt/")

    assert {key[len("ckpt/"):]: object_store.get(bucket, key) for key in object_store.keys(bucket, "ckpt/")} == sent
    assert 0 < peak[0] <= obstore_uploads.SMALL_FILE_BUDGET, f"{peak[0] / MiB:.0f} MiB held at once"

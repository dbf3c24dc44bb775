"""Uploading while producing (Store.upload_stream: storage.obstore.uploads here, storage.botocore.stream where a
bucket stays on botocore; ObjectStorageHook.upload_packed_directory) against MinIO."""

from __future__ import annotations

import os
import tarfile
import threading
import time

import pytest

from operators.storage import checksums
from operators.storage.hook import ObjectStorageHook, StorageError, parse_uri
from operators.storage.progress import TransferProgress
from operators.settings import TrainingSettings

MiB = 1024 * 1024


def make_hook(tmp_path) -> ObjectStorageHook:
    settings = TrainingSettings(workspace=str(tmp_path / "ws"), multipart_threshold=5 * MiB,
                                multipart_chunksize=5 * MiB, transfer_concurrency=4)
    return ObjectStorageHook(settings=settings, progress_interval=0.1)


def stream_to(hook: ObjectStorageHook, uri: str, produce) -> int:
    """The remote store's stream upload: through obstore wherever it reaches the bucket (as here)."""
    loc = parse_uri(uri)
    return hook.store(loc).upload_stream(loc, produce, TransferProgress("test", None, 1))


def part_puts(proxy) -> list[dict]:
    return [r for r in proxy.snapshot() if r["method"] == "PUT" and "partNumber=" in r["query"]]


def test_parts_go_up_while_the_producer_is_still_writing(tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    hook = make_hook(tmp_path)
    chunks = [os.urandom(5 * MiB) for _ in range(3)]
    seen_before_last: list[int] = []

    def produce(write) -> None:
        write(chunks[0])
        write(chunks[1])
        deadline = time.monotonic() + 10
        while len(part_puts(s3_proxy)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the producer waits: the first part must go up without the rest
        seen_before_last.append(len(part_puts(s3_proxy)))
        write(chunks[2])

    size = stream_to(hook, f"s3://{bucket}/stream/three-parts.bin", produce)

    assert size == 15 * MiB and seen_before_last[0] >= 1
    assert object_store.get(bucket, "stream/three-parts.bin") == b"".join(chunks)
    assert object_store.head(bucket, "stream/three-parts.bin")["ETag"].strip('"').endswith("-3")


def test_a_failing_producer_leaves_no_object_and_no_pending_upload(tmp_path, storage_connections, object_store):
    bucket = object_store.bucket()
    hook = make_hook(tmp_path)

    def produce(write) -> None:
        write(os.urandom(11 * MiB))
        raise OSError(28, "No space left on device")

    with pytest.raises(StorageError, match="disk full"):  # the producer's own error, as the store words it
        stream_to(hook, f"s3://{bucket}/stream/broken.bin", produce)

    assert object_store.keys(bucket) == []  # nothing truncated became visible
    assert object_store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []  # aborted


def test_a_failing_upload_stops_the_producer_with_one_clear_line(tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    hook = make_hook(tmp_path)
    s3_proxy.fail_requests(403, "AccessDenied")
    writes = []

    def produce(write) -> None:
        for _ in range(40):  # 200 MiB: far more than the pipe and the part buffers hold
            write(b"x" * (5 * MiB))
            writes.append(1)

    finished = threading.Event()
    errors = []

    def run() -> None:
        try:
            stream_to(hook, f"s3://{bucket}/stream/denied.bin", produce)
        except StorageError as err:
            errors.append(err)
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    assert finished.wait(30), "the upload hung"
    assert errors and str(errors[0]).startswith(f"access denied to s3://{bucket}/stream/denied.bin")
    assert len(writes) < 40  # the producer was stopped, not run to the end


def test_small_stream_is_one_put_checked_against_its_md5(tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    hook = make_hook(tmp_path)
    data = os.urandom(100_000)

    assert stream_to(hook, f"s3://{bucket}/stream/small.bin", lambda write: write(data)) == len(data)

    assert object_store.get(bucket, "stream/small.bin") == data
    # one PUT, verified by the ETag it answered (the MD5 of what was written): no HEAD, no listing
    assert [r["method"] for r in s3_proxy.snapshot() if r["path"].endswith("small.bin")] == ["PUT"]
    # ... carrying the CRC64NVME its downloads verify instead of MD5
    assert object_store.client.head_object(Bucket=bucket, Key="stream/small.bin")["Metadata"] == \
        checksums.metadata(checksums.CRC64NVME.compute(data))


def test_upload_packed_directory_gives_the_same_archive_as_packing_alone(tmp_path, storage_connections, object_store):
    bucket = object_store.bucket()
    hook = make_hook(tmp_path)
    src = tmp_path / "model"
    (src / "sub dir").mkdir(parents=True)
    (src / "weights.bin").write_bytes(os.urandom(12 * MiB))
    (src / "sub dir" / "config ü.json").write_text('{"a": 1}')

    stats = hook.upload_packed_directory(str(src), f"s3://{bucket}/out/model.tar.gz", str(tmp_path / "model.tar.gz"))

    archive = (tmp_path / "model.tar.gz").read_bytes()
    assert stats.bytes == len(archive) and object_store.get(bucket, "out/model.tar.gz") == archive
    assert object_store.head(bucket, "out/model.tar.gz")["ETag"].strip('"').count("-") == 1  # multipart
    with tarfile.open(tmp_path / "model.tar.gz") as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == ["sub dir/config ü.json", "weights.bin"]

"""What the user reads when the store misbehaves: throttling says the store is throttling (real MinIO, and a 503
SlowDown injected by the counting proxy), and a passing throttle is ridden out by the retries."""

from __future__ import annotations

import os
import socket
import time

import pytest

from minio_server import MinioServer
from operators.storage.hook import ObjectStorageHook, StorageError
from operators.settings import TrainingSettings

MiB = 1024 * 1024


def make_hook(tmp_path, connections=None) -> ObjectStorageHook:
    return ObjectStorageHook(connections, settings=TrainingSettings(workspace=str(tmp_path / "ws")))


# Three retries, set in the connection's config_kwargs (merged over ours): the default ten attempts ride out about a
# minute of throttling, too long for a test of the message.
THREE_RETRIES = {"config_kwargs": {"retries": {"mode": "standard", "max_attempts": 3}}}


def test_slowdown_503_says_the_store_is_throttling(tmp_path, storage_connections, object_store, s3_proxy, s3_server,
                                                   set_aws_connection):
    bucket = object_store.bucket()
    object_store.put(bucket, "data/x.bin", b"x" * 100)
    set_aws_connection("aws_default", s3_server.access_key, s3_server.secret_key, s3_proxy.url, **THREE_RETRIES)
    s3_proxy.fail_requests(503, "SlowDown")  # every request, as a store under too much load answers

    with pytest.raises(StorageError) as info:
        make_hook(tmp_path).download(f"s3://{bucket}/data/", str(tmp_path / "out"))

    message = str(info.value)
    assert message.startswith(f"cannot list s3://{bucket}/data/ via connection 'aws_default'")
    assert "the store is throttling requests (SlowDown 503)" in message and "after 4 attempts" in message
    assert "transfer_concurrency" in message and "check the URI" not in message and "\n" not in message
    assert len(s3_proxy.snapshot()) == 4  # botocore's standard mode retried three times before giving up


def test_a_passing_slowdown_is_ridden_out_by_the_retries(tmp_path, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    object_store.put(bucket, "data/x.bin", b"x" * 100)
    s3_proxy.fail_requests(503, "SlowDown", count=2)

    make_hook(tmp_path).download(f"s3://{bucket}/data/", str(tmp_path / "out"))

    assert (tmp_path / "out" / "x.bin").read_bytes() == b"x" * 100
    assert [r["status"] for r in s3_proxy.snapshot()][:3] == [503, 503, 200]


@pytest.fixture
def throttling_server():
    """A second, real MinIO that serves one S3 request at a time and answers the rest 429 TooManyRequests."""
    with MinioServer(env={"MINIO_API_REQUESTS_MAX": "1"}) as server:
        yield server


def test_real_server_throttling_is_reported_as_throttling(tmp_path, set_aws_connection, throttling_server):
    server = throttling_server
    client = server.client()
    client.create_bucket(Bucket="busy")
    client.put_object(Bucket="busy", Key="huge.bin", Body=os.urandom(48 * MiB))
    client.put_object(Bucket="busy", Key="data/x.txt", Body=b"x")
    set_aws_connection("busy_store", server.access_key, server.secret_key, server.url, **THREE_RETRIES)
    hook = make_hook(tmp_path, connections={"s3": "busy_store"})
    # Hold the server's only request slot: a GET whose body nobody reads (the server blocks writing it).
    url = client.generate_presigned_url("get_object", Params={"Bucket": "busy", "Key": "huge.bin"})
    path = url.split(f":{server.port}", 1)[1]
    holder = socket.create_connection(("127.0.0.1", server.port))
    try:
        holder.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode())
        time.sleep(0.5)

        with pytest.raises(StorageError) as info:
            hook.list_objects("s3://busy/data/")

        message = str(info.value)
        assert message.startswith("cannot list s3://busy/data/ via connection 'busy_store'")
        assert "the store is throttling requests (TooManyRequests 429)" in message and "after 4 attempts" in message
    finally:
        holder.close()
    deadline = time.monotonic() + 10
    while True:  # the slot is free again once the server notices the closed connection
        try:
            assert [o.key for o in hook.list_objects("s3://busy/data/")] == ["data/x.txt"]
            break
        except StorageError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

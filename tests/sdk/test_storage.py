"""The SDK's own S3 client: what it sends to a store that is not AWS (the real S3 server, MinIO, through our counting
proxy, which records each request's headers)."""

from __future__ import annotations

import io
import tarfile

import pytest

from counting_proxy import CountingProxy, point_boto3_at
from training_sdk import Estimator
from training_sdk.storage import s3_client

CHECKSUM_HEADERS = ("x-amz-checksum-", "x-amz-sdk-checksum-algorithm", "x-amz-trailer")


@pytest.fixture
def proxied_store(s3_server, monkeypatch, tmp_path):
    """boto3's AWS_* variables point the SDK at a counting proxy in front of MinIO (a COS/OSS/OBS-like endpoint)."""
    proxy = CountingProxy(s3_server.port, "sdk-store")
    point_boto3_at(monkeypatch, s3_server, proxy.url, tmp_path)
    yield proxy
    proxy.close()


def test_code_uploaded_to_a_store_that_is_not_aws_carries_no_checksum_of_boto3s_default(proxied_store, s3_server,
                                                                                          tmp_path):
    # boto3 >= 1.36 adds a CRC32 trailer in an aws-chunked body to every upload, which S3-compatible stores may refuse
    # ("aws-chunked encoding is not supported"); the platform sends checksums only where the API requires one.
    client = s3_server.client()
    client.create_bucket(Bucket="sdk-code")
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")

    uri, _ = Estimator(entry_point="train.py", source_dir=str(src),
                       code_location="s3://sdk-code/code/")._stage_code("training_job")

    puts = [r for r in proxied_store.snapshot() if r["method"] == "PUT"]
    assert puts, proxied_store.snapshot()
    for request in puts:
        sent = request["headers"]
        assert not [h for h in sent if h.startswith(CHECKSUM_HEADERS)], sent
        assert "aws-chunked" not in sent.get("content-encoding", ""), sent
    body = client.get_object(Bucket="sdk-code", Key=uri.removeprefix("s3://sdk-code/"))["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        files = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert files == {"train.py": b"print('hello')\n"}


def test_aws_itself_keeps_boto3s_checksums(monkeypatch, tmp_path, s3_server):
    point_boto3_at(monkeypatch, s3_server, "https://s3.eu-west-1.amazonaws.com", tmp_path)
    assert s3_client().meta.config.request_checksum_calculation == "when_supported"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://cos.ap-guangzhou.myqcloud.com")
    assert s3_client().meta.config.request_checksum_calculation == "when_required"

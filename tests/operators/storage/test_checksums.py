"""storage.checksums: the algorithms (awscrt, in C), which stored values are trusted and how they are read."""

from __future__ import annotations

import io
import os

import pytest

from operators.storage import checksums
from operators.storage.checksums import CRC32, CRC32C, CRC64NVME


def test_the_algorithms_give_the_standard_check_values():
    # The "123456789" check values of CRC-64/NVME, CRC-32C and CRC-32.
    assert CRC64NVME.compute(b"123456789") == 0xAE8B14860A799888
    assert CRC32C.compute(b"123456789") == 0xE3069283
    assert CRC32.compute(b"123456789") == 0xCBF43926
    assert [a.header for a in checksums.ALGORITHMS] == [
        "x-amz-checksum-crc64nvme", "x-amz-checksum-crc32c", "x-amz-checksum-crc32"]
    assert CRC64NVME.member == "ChecksumCRC64NVME"
    assert CRC64NVME.decode(CRC64NVME.encode(12345)) == 12345


def test_a_running_crc_a_files_a_bodys_and_joined_blocks_agree(tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "f").write_bytes(data)
    running = checksums.Running()
    for start in range(0, len(data), 100_000):
        running.update(memoryview(data)[start:start + 100_000])
    body = io.BytesIO(data)
    body.seek(5)

    assert running.value == CRC64NVME.compute(data) == checksums.of_file(str(tmp_path / "f"))
    assert checksums.of_body(body) == CRC64NVME.compute(data[5:]) and body.tell() == 5  # put back where it stood
    blocks = [(CRC64NVME.compute(data[s:s + 1_000_000]), len(data[s:s + 1_000_000]))
              for s in range(0, len(data), 1_000_000)]
    assert checksums.join(CRC64NVME, blocks) == CRC64NVME.compute(data)


def test_the_stores_full_object_checksum_is_preferred_then_our_metadata_copy():
    value = CRC64NVME.compute(b"x")
    headers = {"x-amz-checksum-crc32": CRC32.encode(CRC32.compute(b"x")), "x-amz-checksum-crc64nvme":
               CRC64NVME.encode(value), "x-amz-checksum-type": "FULL_OBJECT", "x-amz-meta-crc64nvme": "AAAAAAAAAAA="}

    assert checksums.from_headers(headers) == checksums.Stored(CRC64NVME, value, "store")
    assert checksums.from_headers({"x-amz-checksum-crc32c": CRC32C.encode(7)}) == checksums.Stored(CRC32C, 7, "store")
    assert checksums.from_headers({"x-amz-meta-crc64nvme": CRC64NVME.encode(value)}) == \
        checksums.Stored(CRC64NVME, value, "metadata")
    assert checksums.from_response({"ResponseMetadata": {"HTTPHeaders": headers}}).source == "store"
    assert checksums.from_metadata(checksums.metadata(value)) == checksums.Stored(CRC64NVME, value, "metadata")


@pytest.mark.parametrize("headers", [
    {"x-amz-checksum-crc32c": "T+tcPA==-3", "x-amz-checksum-type": "COMPOSITE"},  # MinIO's answer for one
    {"x-amz-checksum-crc64nvme": "Dci9EHRmazk=", "x-amz-checksum-type": "COMPOSITE"},
    {"x-amz-checksum-crc32": "24LzPQ==-2"},
    {"x-amz-checksum-crc64nvme": "not base64!"},
    {"x-amz-checksum-crc64nvme": CRC32.encode(5)},  # the wrong width
    {"x-amz-meta-crc64nvme": "tampered"},
    {},
])
def test_composite_and_malformed_values_are_not_checksums_to_verify_with(headers):
    assert checksums.from_headers(headers) is None


def test_a_composite_store_checksum_leaves_our_metadata_copy_to_verify_with():
    headers = {"x-amz-checksum-crc32c": "T+tcPA==-3", "x-amz-checksum-type": "COMPOSITE",
               "x-amz-meta-crc64nvme": CRC64NVME.encode(99)}
    assert checksums.from_headers(headers) == checksums.Stored(CRC64NVME, 99, "metadata")

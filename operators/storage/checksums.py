"""The additional checksums that verify an object's bytes instead of MD5: the one home of the algorithms, their
header and parameter names, where a stored value is read from and which values are trusted.

Why: a plain ETag is an MD5, and MD5 costs ~1.7 ms of CPU per MiB here (the largest part of our client CPU for 1 MiB
objects). CRC64NVME, CRC32C and CRC32 computed in C by awscrt.checksums (the library botocore itself uses for
CRC64NVME) cost ~0.02 ms per MiB (CRC32 ~0.4 ms), and S3 and MinIO keep one per object when the upload sent it (AWS
S3 also computes a CRC64NVME of every object uploaded without one). So a download is verified, in order of
preference, by the object's full-object CRC (computed while the bytes are written), else by MD5 where the ETag is
one, else by its size only.

Where a stored value comes from:
- the store's own checksum: the `x-amz-checksum-<algorithm>` header of a GET or HEAD that asked for it
  (`x-amz-checksum-mode: ENABLED`, added to every GetObject / HeadObject of our botocore clients); the store verified
  it against the bytes it received (S3 and MinIO refuse an upload whose header does not match), so it is the
  strongest value there is;
- our copy of the CRC64NVME in the object's user metadata (`x-amz-meta-crc64nvme`), written by the obstore engine's
  uploads: obstore 0.12 (object_store) has no per-request headers, so it can neither send the store's checksum nor
  read it from a response (a GetResult carries the standard attributes and the user metadata only). This copy is
  what obstore downloads can see; the store does not check it, the downloader does (a wrong copy fails a download,
  it never passes a corrupted one).

Composite checksums are skipped: a multipart upload whose parts carried checksums without `FULL_OBJECT` is stored
with `x-amz-checksum-type: COMPOSITE` and a value `<b64>-<parts>`, the checksum of the parts' checksums. Verifying it
needs every part's boundaries (one HEAD per part), so such an object is verified as if it had no additional
checksum (a multipart ETag: its size only). A full-object CRC of a multipart upload (`FULL_OBJECT`) is verified
like any other: CRCs compose, which is also how the ranges of a large download are checked without a second read.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Mapping

IO_CHUNK = 1024 * 1024


def _crt():
    """awscrt.checksums, imported by the first checksum computed, not by the readers of the algorithms' names."""
    # lazy: awscrt's native library (~0.1 s of CPU); a data-plane step's cache hit computes no checksum
    from awscrt import checksums

    return checksums


@dataclass(frozen=True)
class Algorithm:
    """One CRC the stores keep: its name in headers, its width, and its C implementation (awscrt)."""

    name: str  # as in the header: x-amz-checksum-<name>
    width: int  # bytes of the value
    _compute: str  # the awscrt.checksums function
    _combine: str  # ... and the one that joins two consecutive blocks' values

    @property
    def header(self) -> str:
        return f"x-amz-checksum-{self.name}"

    @property
    def member(self) -> str:
        """botocore's parameter / response member of the value (ChecksumCRC64NVME)."""
        return f"Checksum{self.name.upper()}"

    @property
    def label(self) -> str:
        return self.name.upper()

    def compute(self, data, previous: int = 0) -> int:
        return getattr(_crt(), self._compute)(data, previous)

    def combine(self, first: int, second: int, second_length: int) -> int:
        """The value of two consecutive blocks from each one's value (no byte read again)."""
        return getattr(_crt(), self._combine)(first, second, second_length)

    def encode(self, value: int) -> str:
        return base64.b64encode(value.to_bytes(self.width, "big")).decode("ascii")

    def decode(self, text: str) -> int | None:
        """The value of a header's base64 text; None when it is not one of this algorithm's values."""
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        return int.from_bytes(raw, "big") if len(raw) == self.width else None


CRC64NVME = Algorithm("crc64nvme", 8, "crc64nvme", "combine_crc64nvme")
CRC32C = Algorithm("crc32c", 4, "crc32c", "combine_crc32c")
CRC32 = Algorithm("crc32", 4, "crc32", "combine_crc32")
# In order of preference where a store answers several (the cheapest and widest first).
ALGORITHMS: tuple[Algorithm, ...] = (CRC64NVME, CRC32C, CRC32)
# What our uploads store: full-object CRC64NVME, what AWS S3 computes by default, composable across parts.
UPLOAD_ALGORITHM = CRC64NVME

MODE_HEADER = "x-amz-checksum-mode"  # "ENABLED" on a GET / HEAD: the store answers the checksums it keeps
TYPE_HEADER = "x-amz-checksum-type"  # FULL_OBJECT | COMPOSITE
METADATA_KEY = "crc64nvme"  # our copy in the user metadata: x-amz-meta-crc64nvme (obstore engine, see above)
_METADATA_HEADER = f"x-amz-meta-{METADATA_KEY}"

# botocore parameters of an upload that stores UPLOAD_ALGORITHM as a full-object checksum: CreateMultipartUpload
# takes both, PutObject and UploadPart the algorithm (s3transfer passes each request what it accepts); the value of
# each request's body goes in a header (storage.remote), never in an aws-chunked trailer.
# CompleteMultipartUpload carries no whole-object value (s3transfer would need it before reading the bytes): the
# store composes it from the parts' values (MinIO does, and refuses a part whose value does not match), and the
# HEAD after the upload compares it with the CRC of what was sent.
UPLOAD_ARGS = {"ChecksumAlgorithm": UPLOAD_ALGORITHM.label, "ChecksumType": "FULL_OBJECT"}


@dataclass(frozen=True)
class Stored:
    """A full-object checksum an object carries, and where it was read (the store's own, or our metadata copy)."""

    algorithm: Algorithm
    value: int
    source: str  # "store" | "metadata"

    def describe(self, value: int | None = None) -> str:
        return f"{self.algorithm.label} {self.algorithm.encode(self.value if value is None else value)}"


def from_headers(headers: Mapping[str, str] | None) -> Stored | None:
    """The full-object checksum of a GET / HEAD response (header names in lower case, as botocore's HTTPHeaders
    has them): the store's own first, else our metadata copy; None when neither is there (or only a composite)."""
    if not headers:
        return None
    composite = (headers.get(TYPE_HEADER) or "").upper() == "COMPOSITE"
    for algorithm in ALGORITHMS:
        text = headers.get(algorithm.header)
        if not text or composite or "-" in text:
            continue  # composite "<b64>-<parts>": the checksum of the part checksums (see the module's doc)
        value = algorithm.decode(text)
        if value is not None:
            return Stored(algorithm, value, "store")
    return from_metadata({METADATA_KEY: headers[_METADATA_HEADER]} if _METADATA_HEADER in headers else None)


def from_response(response: Mapping) -> Stored | None:
    """from_headers for a botocore GetObject / HeadObject response."""
    return from_headers((response.get("ResponseMetadata") or {}).get("HTTPHeaders"))


def from_metadata(metadata: Mapping[str, str] | None) -> Stored | None:
    """Our CRC64NVME copy in an object's user metadata (obstore's GetResult.attributes, botocore's Metadata)."""
    text = (metadata or {}).get(METADATA_KEY)
    value = UPLOAD_ALGORITHM.decode(text) if text else None
    return Stored(UPLOAD_ALGORITHM, value, "metadata") if value is not None else None


def metadata(value: int) -> dict[str, str]:
    """The user metadata that carries our copy of an upload's CRC64NVME (from_metadata reads it back)."""
    return {METADATA_KEY: UPLOAD_ALGORITHM.encode(value)}


class Running:
    """A CRC computed as the bytes go by (`update`, like hashlib's objects)."""

    def __init__(self, algorithm: Algorithm = UPLOAD_ALGORITHM) -> None:
        self.algorithm = algorithm
        self.value = 0

    def update(self, data) -> None:
        self.value = self.algorithm.compute(data, self.value)


def of_file(path: str, algorithm: Algorithm = UPLOAD_ALGORITHM) -> int:
    running = Running(algorithm)
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(IO_CHUNK):
            running.update(chunk)
    return running.value


def of_body(body, algorithm: Algorithm = UPLOAD_ALGORITHM) -> int:
    """The CRC of a request body (bytes, or a seekable file object read from where it stands and put back there)."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        return algorithm.compute(body)
    running = Running(algorithm)
    start = body.tell()
    while chunk := body.read(IO_CHUNK):
        running.update(chunk)
    body.seek(start)
    return running.value


def join(algorithm: Algorithm, blocks: list[tuple[int, int]]) -> int:
    """The CRC of consecutive blocks from their (value, length) pairs, in order."""
    total = 0  # the CRC of no bytes
    for value, length in blocks:
        total = algorithm.combine(total, value, length)
    return total


def mismatch_text(uri: str, stored: Stored, computed: int) -> str:
    """The start of the one line that refuses a downloaded body whose CRC is not the stored one."""
    whose = "the store's" if stored.source == "store" else "the one its upload recorded (x-amz-meta-crc64nvme)"
    return f"downloaded {uri} has {stored.describe(computed)} but {whose} is {stored.algorithm.encode(stored.value)}"


__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "CRC32",
    "CRC32C",
    "CRC64NVME",
    "METADATA_KEY",
    "MODE_HEADER",
    "Running",
    "Stored",
    "TYPE_HEADER",
    "UPLOAD_ALGORITHM",
    "UPLOAD_ARGS",
    "from_headers",
    "from_metadata",
    "from_response",
    "join",
    "metadata",
    "mismatch_text",
    "of_body",
    "of_file",
]

"""s3transfer subscribers of the botocore engine's TransferManager transfers (downloads, uploads)."""

from __future__ import annotations

from s3transfer.subscribers import BaseSubscriber

from operators.storage.progress import TransferProgress


def subscriber_classes():
    class KnownObject(BaseSubscriber):
        """Hands the listed size and ETag to s3transfer: no HEAD per object, and ranged GETs use If-Match."""

        def __init__(self, size: int, etag: str | None) -> None:
            self._size = size
            self._etag = etag

        def on_queued(self, future, **kwargs):
            future.meta.provide_transfer_size(self._size)
            if self._etag:
                future.meta.provide_object_etag(f'"{self._etag}"')

    class Progress(BaseSubscriber):
        def __init__(self, progress: TransferProgress) -> None:
            self._progress = progress

        def on_progress(self, future, bytes_transferred, **kwargs):
            self._progress.add_bytes(bytes_transferred)

    class OnDone(BaseSubscriber):
        def __init__(self, callback) -> None:
            self._callback = callback

        def on_done(self, future, **kwargs):
            self._callback(future)

    return KnownObject, Progress, OnDone


__all__ = ["subscriber_classes"]

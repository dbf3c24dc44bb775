"""What a transfer retries and how often: the figures both engines (storage.botocore, storage.obstore) use.

Attempts: every request gets REQUEST_ATTEMPTS (botocore "standard" mode: 503 SlowDown and the other throttling
codes, 5xx, connection errors and resets, with jittered exponential backoff: 1 s base for throttling, 50 ms
otherwise, at most 20 s; object_store: its own backoff, REQUEST_RETRIES retries). Not "adaptive" mode: its
client-side rate limiter, once a few requests were throttled, delays every request of the client (the other
objects' small GETs too), where backing off the throttled request is enough for a transfer. What botocore does not
retry, reading a response body that breaks off (a reset or a truncated body), is retried BODY_ATTEMPTS times by our
small-object downloads, by s3transfer (`num_download_attempts`) and by the obstore engine. Measured through
tests/integration/fault_proxy.py: with 3 attempts (and botocore's quota), connection resets on 30% of requests
failed 13 of 24 transfers (channel downloads, model packs, directory uploads); with these, none
(docs/operations.md, "Object-store faults").

The two places where botocore's retries alone are not enough (its retry quota, a CompleteMultipartUpload retried
after a lost response) are fixed on each botocore client by storage.remote_retries.install.
"""

from __future__ import annotations

import random

# botocore's `max_attempts` counts retries: 9 retries, 10 attempts in all.
REQUEST_RETRIES = 9
REQUEST_ATTEMPTS = REQUEST_RETRIES + 1
BODY_ATTEMPTS = 10


def backoff_seconds(attempt: int) -> float:
    """Jittered exponential backoff before body attempt `attempt + 1` (50 ms base, 5 s cap), like botocore's."""
    return random.random() * min(0.05 * 2**attempt, 5.0)


__all__ = ["BODY_ATTEMPTS", "REQUEST_ATTEMPTS", "REQUEST_RETRIES", "backoff_seconds"]

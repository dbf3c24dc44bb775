"""The SDK names the object-storage schemes once (training_sdk.storage), as a copy of the platform's table: the SDK
installs without the platform, so it cannot import it. A scheme added to one and not the other would have the SDK
upload a job's code to a store the platform cannot read, or treat a platform URI as a local path."""

from __future__ import annotations

from operators.storage.location import REMOTE_SCHEMES
from training_sdk import storage


def test_the_sdk_and_the_platform_know_the_same_object_storage_schemes():
    assert storage.REMOTE_SCHEMES == REMOTE_SCHEMES

"""The launch layer's shared facts about images: what a backend ran (LaunchResult.image_digest) and the digest a run is
pinned to (LaunchRequest.expected_image_digest) survive a deferred task's serialization, and two digests name the
same image whatever form the engine or the kubelet writes them in."""

from __future__ import annotations

import json

import pytest

from operators.launch.base import LaunchRequest, LaunchResult, digest_hex, image_mismatch, same_image

HEX = "0123456789abcdef" * 4
OTHER = "f" * 64


def test_a_pinned_request_keeps_its_digest_through_serialization():
    request = LaunchRequest(job_name="j", job_root="/w/jobs/j", workspace="/w", layout="ti", instance_count=1,
                            hosts=("j-0",), image_uri="training-base:latest", expected_image_digest=f"sha256:{HEX}")
    stored = json.loads(json.dumps(request.to_dict()))  # what a deferred task keeps in the metadata DB
    assert stored["expected_image_digest"] == f"sha256:{HEX}"
    assert LaunchRequest.from_dict(stored) == request
    unpinned = {key: value for key, value in stored.items() if key != "expected_image_digest"}  # an older request
    assert LaunchRequest.from_dict(unpinned).expected_image_digest is None
    assert LaunchResult(True, 0).image_digest is None


@pytest.mark.parametrize("form", [
    f"sha256:{HEX}",  # Docker's image id, containerd's imageID of an image without a registry digest
    f"docker.io/library/python@sha256:{HEX}",  # a registry digest (containerd's imageID)
    f"docker-pullable://registry.example.com:5000/team/train@sha256:{HEX}",  # dockershim / cri-dockerd
    f"docker://sha256:{HEX}",
    f"SHA256:{HEX.upper()}",
    HEX,
])
def test_every_form_of_a_digest_names_its_sha256(form):
    assert digest_hex(form) == HEX
    assert same_image(form, f"sha256:{HEX}") and same_image(f"registry.example.com/x@sha256:{HEX}", form)
    assert not same_image(form, f"sha256:{OTHER}")


@pytest.mark.parametrize("not_a_digest", [None, "", "training-base:latest", "sha256:abc", f"repo:{HEX}x",
                                          "registry.example.com/x@sha512:" + "a" * 128])
def test_what_names_no_sha256_is_never_the_same_image(not_a_digest):
    assert digest_hex(not_a_digest) is None
    assert not same_image(not_a_digest, not_a_digest)  # unknown is never "the same": a pinned run refuses it


def test_the_mismatch_line_names_the_image_both_digests_and_what_to_do():
    line = image_mismatch("training-base:latest", f"sha256:{OTHER}", f"sha256:{HEX}")
    assert line.startswith(f"image training-base:latest is sha256:{OTHER}, not sha256:{HEX} that the reproduced run "
                           "ran; ")
    assert "\n" not in line and "image_uri" in line

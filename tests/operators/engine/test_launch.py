"""What the launch stage and the SDK's local mode share: the request a spec becomes (pinned to an image digest when a
reproduction asks) and the summary the launch stage returns (the image the backend ran: the run's lineage records it).
"""

from __future__ import annotations

import json

from operators.engine.launch import launch_request, launch_summary
from operators.engine.results import LaunchSummary
from operators.launch.base import IMAGE_ERROR, LaunchRequest, LaunchResult

DIGEST = "sha256:" + "0123456789abcdef" * 4


class TwoHosts:
    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        return [f"{job_name}-{i}" for i in range(instance_count)]


def test_a_reproduction_s_request_is_pinned_to_the_image_digest_and_others_are_not(make_context):
    ctx = make_context(backend="docker", image_uri="training-base:latest")
    plain = launch_request(ctx.spec, ctx.layout, ctx.settings, TwoHosts())
    assert plain.expected_image_digest is None
    pinned = launch_request(ctx.spec, ctx.layout, ctx.settings, TwoHosts(), expected_image_digest=DIGEST)
    assert pinned.expected_image_digest == DIGEST and pinned.image_uri == "training-base:latest"
    assert LaunchRequest.from_dict(json.loads(json.dumps(pinned.to_dict()))) == pinned  # a deferred task's copy


def test_the_summary_carries_the_image_the_backend_ran_a_failed_one_s_too():
    ran = LaunchResult(True, 0, image_digest=DIGEST)
    assert launch_summary(ran, {"loss": 0.5}) == LaunchSummary(True, 0, {"loss": 0.5}, None, {}, DIGEST)
    refused = LaunchResult(False, None, "image x is sha256:..., not ...", IMAGE_ERROR, image_digest=None)
    failed = launch_summary(refused, {}).to_dict()  # the "outcome" XCom of a failed launch
    assert failed["image_digest"] is None and failed["failure_class"] == IMAGE_ERROR
    assert launch_summary(LaunchResult(False, 1, "boom", "user_error", image_digest=DIGEST), {}).to_dict()[
        "image_digest"] == DIGEST


def test_a_spec_that_reproduces_a_run_pins_the_image_that_run_ran(make_context):
    ctx = make_context(backend="docker", image_uri="training-base:latest",
                       reproduces={"job_name": "churn-1", "image_digest": DIGEST})
    assert launch_request(ctx.spec, ctx.layout, ctx.settings, TwoHosts()).expected_image_digest == DIGEST

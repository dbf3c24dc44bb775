"""A failed Job's event (operators/launch/kubernetes/job_failure.py) from its Failed condition alone."""

from types import SimpleNamespace

from operators.launch.base import EVICTED, PLATFORM_ERROR
from operators.launch.kubernetes.job_failure import job_failure


def _condition(reason: str, message: str):
    return SimpleNamespace(reason=reason, message=message)


def test_a_disruption_the_watch_never_saw_is_an_eviction_by_the_jobs_own_condition():
    # On a loaded control plane the evicted pod was deleted before the watch listed it: only the Job's condition
    # says what happened. A whole retry resumes from the last checkpoint (EVICTED), not a platform error.
    condition = _condition("PodFailurePolicy", "Pod team-a/train-1-kwok-evict-two-0-pgv8l has condition "
                                               "DisruptionTarget matching FailJob rule at index 1")
    event = job_failure(condition, [], lambda pod: "algo-1", {}, instance_count=2)
    assert event["failure_class"] == EVICTED
    assert event["message"].startswith("algo-1 was evicted or preempted (DisruptionTarget)")


def test_another_pod_failure_policy_rule_stays_what_it_was():
    condition = _condition("PodFailurePolicy", "Container train for pod team-a/x-0 failed with exit code 2 "
                                               "matching FailJob rule at index 0")
    assert job_failure(condition, [], lambda pod: "algo-1", {}, instance_count=2)["failure_class"] == PLATFORM_ERROR
    backoff = _condition("BackoffLimitExceeded", "Pod team-a/x-0 has condition DisruptionTarget")
    assert job_failure(backoff, [], lambda pod: "algo-1", {}, instance_count=2)["failure_class"] == PLATFORM_ERROR

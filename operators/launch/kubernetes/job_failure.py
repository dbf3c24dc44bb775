"""What a failed training Job's event says: the failure class and one line from the Job's Failed condition and
its pods' terminated states (the runtime's exit codes first, OOM, evictions, the time limit). Pure functions
over kubernetes client objects; the event holds primitives only (see operators/launch/kubernetes/watch.py)."""

from __future__ import annotations

import re
from typing import Any, Callable

from operators.launch.kubernetes.pods import short_text, train_status
from operators.launch.base import (
    EVICTED,
    OOM,
    PLATFORM_ERROR,
    TIMEOUT,
    describe_exit,
    exit_failure_class,
    is_runtime_exit_code,
)


def failure_event(failure_class: str | None, message: str, *, exit_code: int | None = None,
                  host: str | None = None, finished: bool = True, status: str = "failed") -> dict[str, Any]:
    return {"status": status, "failure_class": failure_class, "message": message, "detail": None,
            "exit_code": exit_code, "host": host, "job_finished": finished}


# The Job controller's message when a pod's disruption (eviction, preemption, node drain) failed the Job through the
# podFailurePolicy rule on DisruptionTarget: "Pod <namespace>/<name> has condition DisruptionTarget matching ...".
_DISRUPTED_POD = re.compile(r"\bPod (?:[^/\s]+/)?(\S+) has condition DisruptionTarget\b")


def _disruption_in(condition: Any) -> dict[str, str]:
    match = _DISRUPTED_POD.search(condition.message or "") if condition.reason == "PodFailurePolicy" else None
    return {match.group(1): "DisruptionTarget"} if match else {}


def job_failure(condition: Any, pods: list[Any], host: Callable[[str], str], disruptions: dict[str, str],
                instance_count: int) -> dict[str, Any]:
    """The event of a Job whose Failed condition is set."""
    reason = condition.reason or "Failed"
    failed = []
    for pod in pods:
        status = train_status(pod)
        terminated = status.state.terminated if status and status.state else None
        if terminated is not None and terminated.exit_code:
            finished_at = terminated.finished_at
            failed.append((pod.metadata.name, terminated, str(finished_at or "")))
    # The runtime's own exit codes (1-4) name the cause; 137/143 are the peers the Job controller killed.
    failed.sort(key=lambda item: (not is_runtime_exit_code(item[1].exit_code), item[2]))
    if reason == "DeadlineExceeded":
        return failure_event(
            TIMEOUT,
            f"the job ran longer than max_run_seconds and Kubernetes stopped it ({condition.message or reason})",
        )
    for name, terminated, _ in failed:
        if terminated.reason == "OOMKilled":
            return failure_event(
                OOM,
                f"{host(name)} ran out of memory (OOMKilled); raise resources.memory or lower the batch size",
                exit_code=terminated.exit_code,
                host=host(name),
            )
    if not disruptions:  # the disrupted pod may be gone before the watch saw it: the Job's condition names it too
        disruptions = _disruption_in(condition)
    if disruptions and (instance_count > 1 or not failed):
        pod, why = next(iter(disruptions.items()))
        after = ""
        if failed:
            name, terminated, _ = failed[0]
            after = f"; then {host(name)} failed with exit code {terminated.exit_code}"
        return failure_event(
            EVICTED,
            f"{host(pod)} was evicted or preempted ({why}){after}; retry to resume from the last checkpoint",
            exit_code=failed[0][1].exit_code if failed else None,
            host=host(pod),
        )
    if failed:
        name, terminated, _ = failed[0]
        code = terminated.exit_code
        failure_class = exit_failure_class(code)
        what = describe_exit(code, f"the container was killed or crashed ({terminated.reason or 'Error'})")
        message = f"{what} on {host(name)}, exit code {code}"
        if reason == "FailedIndexes":  # an elastic job's host failed more often than backoffLimitPerIndex allows
            message = (f"{host(name)} was lost more often than elastic max_restarts allows; the last time: {message}"
                       "; retry to resume from the last checkpoint")
        result = failure_event(failure_class, message, exit_code=code, host=host(name))
        # The pod's termination message: its last log lines (terminationMessagePolicy FallbackToLogsOnError).
        result["detail"] = short_text(terminated.message, 2000) or None
        return result
    return failure_event(PLATFORM_ERROR, f"Kubernetes failed the Job: {reason}: {condition.message or ''}".strip())

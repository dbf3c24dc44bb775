"""The watch of an elastic training Job (backoffLimitPerIndex set): a lost host and its replacement pod are said once
each in the task log, an OOM-killed host is replaced rather than failed at once, a user error is not called a lost
host, and a Job that fails because a host used up its restarts says so."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1Job,
    V1JobCondition,
    V1JobSpec,
    V1JobStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1PodTemplateSpec,
)

from operators.launch.base import OOM, PLATFORM_ERROR
from operators.launch.kubernetes.job_failure import job_failure
from operators.launch.kubernetes.names import INDEX_ANNOTATION
from operators.launch.kubernetes.watch import JobWatch

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)


def pod(name: str, index: int, created: int, exit_code: int | None = None, reason: str | None = None,
        deleting: bool = False) -> V1Pod:
    if exit_code is None:
        state, phase = V1ContainerState(running=V1ContainerStateRunning(started_at=T0)), "Running"
    else:
        state = V1ContainerState(terminated=V1ContainerStateTerminated(exit_code=exit_code, reason=reason))
        phase = "Succeeded" if exit_code == 0 else "Failed"
    return V1Pod(
        metadata=V1ObjectMeta(name=name, uid=f"uid-{name}", annotations={INDEX_ANNOTATION: str(index)},
                              creation_timestamp=T0 + timedelta(seconds=created),
                              deletion_timestamp=T0 + timedelta(seconds=99) if deleting else None),
        spec=V1PodSpec(containers=[], node_name="node-1"),
        status=V1PodStatus(phase=phase, container_statuses=[V1ContainerStatus(
            name="train", image="i", image_id="", ready=exit_code is None, restart_count=0, state=state)]))


def job(per_index: int | None, condition: str | None = None, reason: str | None = None) -> V1Job:
    conditions = [V1JobCondition(type=condition, status="True", reason=reason, message="")] if condition else []
    return V1Job(metadata=V1ObjectMeta(name="el", uid="job-uid"),
                 spec=V1JobSpec(backoff_limit_per_index=per_index, template=V1PodTemplateSpec()),
                 status=V1JobStatus(conditions=conditions))


def watch(lines: list[str]) -> JobWatch:
    return JobWatch(None, name="el", namespace="ns", instance_count=3, poll_interval=1, image_pull_grace_seconds=1,
                    emit=lines.append)


def elastic_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("[kubernetes] elastic:")]


def test_a_lost_host_and_its_replacement_are_said_once_each():
    lines: list[str] = []
    w = watch(lines)
    running = [pod("el-0-a", 0, 0), pod("el-1-b", 1, 0), pod("el-2-c", 2, 0)]
    assert w.verdict(job(3), running) is None
    assert elastic_lines(lines) == []
    lost = [running[0], pod("el-1-b", 1, 0, exit_code=143, reason="Error"), running[2]]
    assert w.verdict(job(3), lost) is None
    assert elastic_lines(lines) == []  # not yet: a failing Job stops its pods too; the next poll tells
    for _ in range(2):  # said once, however often the watch polls
        assert w.verdict(job(3), lost) is None
    replaced = [*lost, pod("el-1-d", 1, 30)]
    assert w.verdict(job(3), replaced) is None
    assert w.verdict(job(3, "Complete"), replaced)["status"] == "success"
    assert w.elastic_hosts.restarts("el") == {"el-1": 1}  # the job's result says so (the training-jobs view shows it)
    assert elastic_lines(lines) == [
        "[kubernetes] elastic: el-1 lost (pod el-1-b: exit code 143, Error); the other hosts go on or wait for it, "
        "Kubernetes starts a replacement unless the job fails",
        "[kubernetes] elastic: el-1 restarted: replacement pod el-1-d (restart 1 of this host, at most 3); the group "
        "re-forms with it and resumes from the last checkpoint",
    ]


def test_a_deleted_pod_is_a_lost_host_before_its_container_ends():
    lines: list[str] = []
    w = watch(lines)
    for _ in range(2):  # said when a second poll sees the Job going on (a failing Job stops its pods too)
        assert w.verdict(job(2), [pod("el-0-a", 0, 0), pod("el-1-b", 1, 0, deleting=True)]) is None
    assert elastic_lines(lines) == ["[kubernetes] elastic: el-1 lost (pod el-1-b: its pod is being deleted); the "
                                    "other hosts go on or wait for it, Kubernetes starts a replacement unless the "
                                    "job fails"]


def test_an_oom_killed_host_of_an_elastic_job_is_replaced_not_failed_at_once():
    oom = [pod("el-0-a", 0, 0), pod("el-1-b", 1, 0, exit_code=137, reason="OOMKilled")]
    static_lines: list[str] = []
    static = watch(static_lines).verdict(job(None), oom)
    assert static["failure_class"] == OOM and static["job_finished"] is False  # as before: fail fast
    lines: list[str] = []
    elastic = watch(lines)
    assert elastic.verdict(job(3), oom) is None and elastic.verdict(job(3), oom) is None
    assert "el-1 lost (pod el-1-b: exit code 137, OOMKilled)" in elastic_lines(lines)[0]


def test_a_user_error_is_not_a_lost_host_and_a_failing_job_s_pods_are_not_either():
    lines: list[str] = []
    w = watch(lines)
    assert w.verdict(job(3), [pod("el-0-a", 0, 0, exit_code=1), pod("el-1-b", 1, 0)]) is None
    # The Job controller stops the other pods before this poll sees the Job's condition: not (yet) a lost host.
    assert w.verdict(job(3), [pod("el-0-a", 0, 0, exit_code=1), pod("el-1-b", 1, 0, exit_code=143, deleting=True)]) \
        is None
    failed = w.verdict(job(3, "Failed", "PodFailurePolicy"),
                       [pod("el-0-a", 0, 0, exit_code=1), pod("el-1-b", 1, 0, exit_code=143, deleting=True)])
    assert failed["status"] == "failed" and failed["exit_code"] == 1
    assert elastic_lines(lines) == []


def test_a_host_past_its_restarts_fails_the_job_saying_so():
    condition = V1JobCondition(type="Failed", status="True", reason="FailedIndexes", message="Job has failed indexes")
    event = job_failure(condition, [pod("el-1-x", 1, 0, exit_code=143, reason="Error")], lambda name: "el-1", {},
                        instance_count=3)
    assert event["failure_class"] == PLATFORM_ERROR
    assert event["message"].startswith("el-1 was lost more often than elastic max_restarts allows; the last time: ")
    assert event["message"].endswith("exit code 143; retry to resume from the last checkpoint")

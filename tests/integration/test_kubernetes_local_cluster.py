"""The Kubernetes launcher against the real local control plane (tools/k8s): real API server (TLS, RBAC, Pod
Security admission, Priority admission), real Job / garbage-collector / TTL / endpointslice controllers and
scheduler; kwok plays the node's kubelet (pod annotations choose how a container ends, see
tools/k8s/kwok/pod-stages.yaml). Each test is one scenario of issue 14; its duration is printed (-s)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from kube_cluster import PLAY, kube_admin, kube_cluster, kube_namespace  # noqa: F401
from operators.hooks.launcher import EVICTED, IMAGE_ERROR, PLATFORM_ERROR, TIMEOUT, USER_ERROR, LaunchRequest
from operators.hooks.kubernetes_launcher import KubernetesLauncherHook
from operators.kubernetes_names import JOB_LABEL, kube_name

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


def make_request(job_name: str, hosts: int = 1, annotations: dict | None = None, max_run_seconds: int = 600,
                 **options) -> LaunchRequest:
    workspace = Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"])
    job_root = workspace / "jobs" / job_name
    (job_root / "output").mkdir(parents=True, exist_ok=True)
    (workspace / "cache" / "c0ffee").mkdir(parents=True, exist_ok=True)
    name = kube_name(job_name)
    return LaunchRequest(
        job_name=job_name, job_root=str(job_root), workspace=str(workspace), layout="ti", instance_count=hosts,
        hosts=tuple(f"{name}-{i}.{name}" for i in range(hosts)),
        channel_entries={"train": str(workspace / "cache" / "c0ffee")}, image_uri="training-base:latest",
        resources={"cpu": "1", "memory": "1Gi"}, max_run_seconds=max_run_seconds, env={"TM_LOG_LEVEL": "INFO"},
        options={"poll_interval": 0.5, "annotations": annotations or {}, **options})


def wait_for(what: str, check, timeout: float = 30.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not within {timeout:.0f}s")


def job_pods(core, namespace: str, name: str) -> list:
    return core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}").items


def gone(kube_admin, namespace: str, name: str) -> bool:
    from kubernetes.client.rest import ApiException

    core, batch = kube_admin["core"], kube_admin["batch"]
    for read in (lambda: batch.read_namespaced_job(name, namespace),
                 lambda: core.read_namespaced_service(name, namespace)):
        try:
            read()
            return False
        except ApiException as err:
            if err.status != 404:
                raise
    return not job_pods(core, namespace, name)


def test_four_hosts_resolve_through_the_headless_service_and_kill_removes_everything(kube_namespace, kube_admin):
    started = time.monotonic()
    hook = KubernetesLauncherHook()
    request = make_request("kwok-dns", hosts=4, annotations={PLAY + "run": "1h"})
    hook.start(request)
    core, discovery = kube_admin["core"], kube_admin["discovery"]

    def endpoints():
        slices = discovery.list_namespaced_endpoint_slice(
            kube_namespace, label_selector="kubernetes.io/service-name=kwok-dns").items
        return sorted(e.hostname for s in slices for e in s.endpoints or [] if e.addresses)

    assert wait_for("4 endpoints", lambda: len(endpoints()) == 4 and endpoints()) == [f"kwok-dns-{i}" for i in range(4)]
    pods = job_pods(core, kube_namespace, "kwok-dns")
    assert sorted((p.spec.hostname, p.spec.subdomain) for p in pods) == [(f"kwok-dns-{i}", "kwok-dns") for i in range(4)]
    for pod in pods:
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["JOB_COMPLETION_INDEX"].value_from.field_ref.field_path.endswith("job-completion-index']")
    killed = time.monotonic()
    hook.stop(request)
    wait_for("the Job, its pods and its Service gone", lambda: gone(kube_admin, kube_namespace, "kwok-dns"), 30)
    print(f"four hosts + kill: {time.monotonic() - started:.1f}s (gone {time.monotonic() - killed:.1f}s after kill)")


def test_reattach_keeps_the_job_and_a_completed_job_is_reported_without_a_new_one(kube_namespace, kube_admin):
    started = time.monotonic()
    batch = kube_admin["batch"]
    request = make_request("kwok-reattach", annotations={PLAY + "run": "4s"})
    KubernetesLauncherHook().start(request)
    uid = batch.read_namespaced_job("kwok-reattach", kube_namespace).metadata.uid
    KubernetesLauncherHook().start(request)  # a retry / restarted worker: 409 AlreadyExists -> reattach
    assert batch.read_namespaced_job("kwok-reattach", kube_namespace).metadata.uid == uid
    lines: list[str] = []
    result = KubernetesLauncherHook().run(request, lines.append)  # a new hook finds and follows the same Job
    assert result.succeeded, (result, lines[-20:])
    assert batch.read_namespaced_job("kwok-reattach", kube_namespace).metadata.uid == uid
    again = KubernetesLauncherHook().run(request, [].append)  # complete: reported, no new Job
    assert again.succeeded and batch.read_namespaced_job("kwok-reattach", kube_namespace).metadata.uid == uid
    print(f"reattach: {time.monotonic() - started:.1f}s")


def test_a_failed_job_is_replaced_on_retry(kube_namespace, kube_admin):
    started = time.monotonic()
    batch = kube_admin["batch"]
    request = make_request("kwok-replace", annotations={PLAY + "exit-code": "1", PLAY + "message": "boom"})
    result = KubernetesLauncherHook().run(request, [].append)
    assert not result.succeeded and result.failure_class == USER_ERROR and "boom" in result.failure_reason
    uid = batch.read_namespaced_job("kwok-replace", kube_namespace).metadata.uid
    KubernetesLauncherHook().start(request)
    assert batch.read_namespaced_job("kwok-replace", kube_namespace).metadata.uid != uid
    print(f"replace failed job: {time.monotonic() - started:.1f}s")


def test_max_run_seconds_is_a_timeout(kube_namespace):
    started = time.monotonic()
    request = make_request("kwok-deadline", annotations={PLAY + "run": "1h"}, max_run_seconds=3)
    result = KubernetesLauncherHook().run(request, [].append)
    assert not result.succeeded and result.failure_class == TIMEOUT, result
    assert time.monotonic() - started < 30
    print(f"max_run_seconds: {time.monotonic() - started:.1f}s")


def test_single_host_eviction_through_the_eviction_api_is_replaced_and_finishes(kube_namespace, kube_admin):
    started = time.monotonic()
    core = kube_admin["core"]
    hook = KubernetesLauncherHook()
    request = make_request("kwok-evict-one", annotations={PLAY + "run": "6s"})
    hook.start(request)
    pod = wait_for("a running pod", lambda: [p for p in job_pods(core, kube_namespace, "kwok-evict-one")
                                             if p.status.phase == "Running"])[0]
    core.create_namespaced_pod_eviction(pod.metadata.name, kube_namespace, {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod.metadata.name}})
    lines: list[str] = []
    result = hook.run(request, lines.append)
    assert result.succeeded, (result, lines[-20:])
    assert any("evicted" in line for line in lines), lines
    print(f"eviction, one host: {time.monotonic() - started:.1f}s")

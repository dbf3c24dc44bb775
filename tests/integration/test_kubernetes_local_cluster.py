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

from kube_cluster import PLAY
from operators.launch.base import EVICTED, IMAGE_ERROR, PLATFORM_ERROR, TIMEOUT, USER_ERROR, LaunchRequest
from operators.launch.kubernetes.launcher import KubernetesLauncherHook
from operators.launch.registry import trigger_for
from operators.launch.names import JOB_LABEL, resource_name

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


def make_request(job_name: str, hosts: int = 1, annotations: dict | None = None, max_run_seconds: int = 600,
                 secret_env: dict | None = None, **options) -> LaunchRequest:
    workspace = Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"])
    job_root = workspace / "jobs" / job_name
    (job_root / "output").mkdir(parents=True, exist_ok=True)
    (workspace / "cache" / "c0ffee").mkdir(parents=True, exist_ok=True)
    name = resource_name(job_name)
    return LaunchRequest(
        job_name=job_name, job_root=str(job_root), workspace=str(workspace), layout="ti", instance_count=hosts,
        hosts=tuple(f"{name}-{i}.{name}" for i in range(hosts)),
        channel_entries={"train": str(workspace / "cache" / "c0ffee")}, image_uri="training-base:latest",
        resources={"cpu": "1", "memory": "1Gi"}, max_run_seconds=max_run_seconds, env={"TM_LOG_LEVEL": "INFO"},
        options={"poll_interval": 0.5, "annotations": annotations or {}, **options}, secret_env=secret_env or {})


def wait_for(what: str, check, timeout: float = 120.0, interval: float = 0.2):
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
    wait_for("the Job, its pods and its Service gone", lambda: gone(kube_admin, kube_namespace, "kwok-dns"), 120)
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


def job_secrets(core, namespace: str, name: str) -> list:
    return core.list_namespaced_secret(namespace, label_selector=f"{JOB_LABEL}={name}").items


def test_secrets_by_reference_live_in_one_secret_owned_by_the_job(kube_namespace, kube_admin):
    """Secret first, then the Job, then the Job owns the Secret: pods only see a secretKeyRef; a retry adopts the
    Secret there (never a second one); stop() removes it; the garbage collector removes it with the Job."""
    import base64
    import uuid

    started = time.monotonic()
    core, batch, api = kube_admin["core"], kube_admin["batch"], kube_admin["api"]
    token = f"tok-{uuid.uuid4().hex}"
    request = make_request("kwok-secret", annotations={PLAY + "run": "1h"}, secret_env={"WANDB_API_KEY": token})
    hook = KubernetesLauncherHook()
    hook.start(request)
    job = batch.read_namespaced_job("kwok-secret", kube_namespace)
    [secret] = job_secrets(core, kube_namespace, "kwok-secret")
    assert secret.metadata.name == "kwok-secret-env"
    assert base64.b64decode(secret.data["WANDB_API_KEY"]).decode() == token
    assert [(o.kind, o.uid) for o in secret.metadata.owner_references] == [("Job", job.metadata.uid)]
    pods = wait_for("a pod", lambda: job_pods(core, kube_namespace, "kwok-secret"))
    env = {e.name: e for e in pods[0].spec.containers[0].env}
    ref = env["WANDB_API_KEY"].value_from.secret_key_ref
    assert (ref.name, ref.key, env["WANDB_API_KEY"].value) == ("kwok-secret-env", "WANDB_API_KEY", None)
    for obj in (job, *pods):  # the value is in the Secret only, never in the Job or Pod spec
        assert token not in json.dumps(api.sanitize_for_serialization(obj))

    # A retry / restarted worker reattaches: the same Secret, adopted, not a second one. Also after a try that died
    # between creating the Secret and making the Job its owner.
    core.patch_namespaced_secret("kwok-secret-env", kube_namespace, [
        {"op": "remove", "path": "/metadata/ownerReferences"}])
    KubernetesLauncherHook().start(request)
    [again] = job_secrets(core, kube_namespace, "kwok-secret")
    assert again.metadata.uid == secret.metadata.uid
    assert [o.uid for o in again.metadata.owner_references] == [job.metadata.uid]
    assert batch.read_namespaced_job("kwok-secret", kube_namespace).metadata.uid == job.metadata.uid

    hook.stop(request)  # on_kill
    assert not job_secrets(core, kube_namespace, "kwok-secret")
    wait_for("the Job gone", lambda: gone(kube_admin, kube_namespace, "kwok-secret"), 120)

    # A failed Job replaced by the retry: its Secret goes with it and the new Job owns a fresh one.
    # Its termination message (the pod's last log lines) shows the value: the trigger, which never saw the worker's
    # masker, masks it with the values it reads from the Job's Secret (the event is stored in the metadata DB).
    failing = make_request("kwok-secret-gc", annotations={PLAY + "exit-code": "1", PLAY + "message": f"bad {token}"},
                           secret_env={"WANDB_API_KEY": token})
    hook.start(failing)
    event = asyncio_run_trigger(trigger_for(hook, failing))
    assert event["status"] == "failed" and "bad ***" in json.dumps(event) and token not in json.dumps(event), event
    old = batch.read_namespaced_job("kwok-secret-gc", kube_namespace).metadata.uid
    KubernetesLauncherHook().start(failing)
    new = batch.read_namespaced_job("kwok-secret-gc", kube_namespace).metadata.uid
    assert new != old
    [fresh] = job_secrets(core, kube_namespace, "kwok-secret-gc")
    assert [o.uid for o in fresh.metadata.owner_references] == [new]
    # Whatever deletes the Job (TTL, kubectl) deletes the Secret: the control plane's garbage collector.
    batch.delete_namespaced_job("kwok-secret-gc", kube_namespace, propagation_policy="Background")
    wait_for("the garbage collector deleting the Secret", lambda: not job_secrets(core, kube_namespace,
                                                                                  "kwok-secret-gc"), 120)
    print(f"secrets by reference: {time.monotonic() - started:.1f}s")


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
    # 20 s: the pod is still running when the test, polling at load, has seen it Running and evicts it
    request = make_request("kwok-evict-one", annotations={PLAY + "run": "20s"})
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


def test_pod_security_rejection_fails_fast_with_the_api_message(kube_namespace, kube_admin):
    started = time.monotonic()
    request = make_request("kwok-psa", container_security_context={"allowPrivilegeEscalation": True})
    lines: list[str] = []
    result = KubernetesLauncherHook().run(request, lines.append)
    seconds = time.monotonic() - started
    assert not result.succeeded and result.failure_class == USER_ERROR, result
    assert 'violates PodSecurity "restricted:latest"' in result.failure_reason
    assert "allowPrivilegeEscalation" in result.failure_reason
    assert seconds < 120, f"took {seconds:.0f}s"  # a hang guard: waiting it out would take the 600 s startup timeout
    wait_for("the refused Job deleted", lambda: gone(kube_admin, kube_namespace, "kwok-psa"), 120)
    print(f"Pod Security rejection: {seconds:.1f}s")


def test_image_pull_error_fails_fast_with_the_kubelets_message_and_stops_the_job(kube_namespace, kube_admin):
    started = time.monotonic()
    request = make_request("kwok-image", annotations={
        PLAY + "image-pull-error": "pull access denied for training-base, repository does not exist"})
    lines: list[str] = []
    result = KubernetesLauncherHook().run(request, lines.append)
    assert not result.succeeded and result.failure_class == IMAGE_ERROR, result
    assert "repository does not exist" in result.failure_reason
    assert any("Failed" in line and "pull" in line for line in lines), lines  # the kubelet's warning event
    wait_for("the Job stopped", lambda: gone(kube_admin, kube_namespace, "kwok-image"), 120)
    print(f"image pull error: {time.monotonic() - started:.1f}s")


def test_missing_priority_class_fails_fast_with_the_api_message(kube_namespace):
    started = time.monotonic()
    result = KubernetesLauncherHook().run(make_request("kwok-priority", priority_class="no-such-priority"), [].append)
    seconds = time.monotonic() - started
    assert not result.succeeded and result.failure_class == USER_ERROR, result
    assert "no PriorityClass with name no-such-priority was found" in result.failure_reason
    assert seconds < 120, f"took {seconds:.0f}s"  # a hang guard: waiting it out would take the 600 s startup timeout
    print(f"missing PriorityClass: {seconds:.1f}s")


def test_multi_host_platform_error_fails_the_whole_job_and_a_retry_restarts_it(kube_namespace, kube_admin):
    """Static rendezvous: no lone replacement rank. The Job fails at once; Airflow's retry starts all hosts anew."""
    started = time.monotonic()
    core, batch = kube_admin["core"], kube_admin["batch"]
    request = make_request("kwok-multi", hosts=2, annotations={
        PLAY + "exit-code": "4", PLAY + "index": "1", PLAY + "message": "NCCL error: unhandled system error"})
    result = KubernetesLauncherHook().run(request, [].append)
    assert not result.succeeded and result.failure_class == PLATFORM_ERROR and result.retryable, result
    assert "kwok-multi-1" in result.failure_reason and "exit code 4" in result.failure_reason
    job = batch.read_namespaced_job("kwok-multi", kube_namespace)
    pods = job_pods(core, kube_namespace, "kwok-multi")
    indexes = [p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods]
    assert indexes.count("1") == 1, "Kubernetes replaced the failed rank instead of failing the whole job"
    assert job.status.failed >= 1 and not job.status.active
    KubernetesLauncherHook().start(request)  # the Airflow retry: the failed Job is replaced whole
    assert batch.read_namespaced_job("kwok-multi", kube_namespace).metadata.uid != job.metadata.uid
    print(f"multi-host platform error + whole-job retry: {time.monotonic() - started:.1f}s")


def test_multi_host_eviction_fails_the_job_as_evicted_for_a_whole_retry(kube_namespace, kube_admin):
    started = time.monotonic()
    core = kube_admin["core"]
    hook = KubernetesLauncherHook()
    request = make_request("kwok-evict-two", hosts=2, annotations={PLAY + "run": "1h"})
    hook.start(request)
    running = wait_for("two running pods", lambda: len([p for p in job_pods(core, kube_namespace, "kwok-evict-two")
                                                        if p.status.phase == "Running"]) == 2)
    assert running
    pod = sorted(job_pods(core, kube_namespace, "kwok-evict-two"), key=lambda p: p.metadata.name)[0]
    core.create_namespaced_pod_eviction(pod.metadata.name, kube_namespace, {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod.metadata.name}})
    result = hook.run(request, [].append)
    assert not result.succeeded and result.failure_class == EVICTED and result.retryable, result
    assert len(job_pods(core, kube_namespace, "kwok-evict-two")) <= 2  # no replacement rank was started
    print(f"eviction, two hosts: {time.monotonic() - started:.1f}s")


def test_ttl_removes_everything_and_a_retry_reports_the_success(kube_namespace, kube_admin):
    started = time.monotonic()
    request = make_request("kwok-ttl", ttl_seconds_after_finished=3)
    assert KubernetesLauncherHook().run(request, [].append).succeeded
    # What `train` writes last in the shared job root (kwok runs no container, so the test writes it).
    Path(request.job_root, "output", "success").write_text("")
    wait_for("the TTL controller removing Job, pods and Service",
             lambda: gone(kube_admin, kube_namespace, "kwok-ttl"), 120)
    removed = time.monotonic() - started
    lines: list[str] = []
    again = KubernetesLauncherHook().run(request, lines.append)  # a task retry after the TTL
    assert again.succeeded, (again, lines)
    assert gone(kube_admin, kube_namespace, "kwok-ttl"), "the retry trained again"
    print(f"TTL: removed after {removed:.1f}s, retry reported the success")


def docs_role(namespace: str) -> dict:
    """The Role of docs/kubernetes.md, as a user would copy it."""
    text = (REPO / "docs" / "kubernetes.md").read_text()
    block = re.search(r"```yaml\n(\s*apiVersion: rbac.authorization.k8s.io/v1\n.*?kind: Role\n.*?)```", text, re.S)
    role = yaml.safe_load(textwrap_dedent(block.group(1)))
    role["metadata"]["namespace"] = namespace
    return role


def textwrap_dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text)


def test_the_whole_lifecycle_as_a_client_bound_only_to_the_documented_role(
        kube_cluster, kube_namespace, kube_admin, monkeypatch):
    started = time.monotonic()
    role = docs_role(kube_namespace)
    kube_admin["rbac"].create_namespaced_role(kube_namespace, role)
    kube_admin["rbac"].create_namespaced_role_binding(kube_namespace, {
        "metadata": {"name": "airflow-training-launcher"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "airflow-launcher"}]})
    kubeconfig = kube_cluster.user_kubeconfig("airflow-launcher")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}))
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    as_user = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    with pytest.raises(ApiException) as denied:  # the binding is all it has
        as_user.list_namespaced_secret(kube_namespace)
    assert denied.value.status == 403

    lines: list[str] = []
    hook = KubernetesLauncherHook()
    # with a secret by reference: the Role must let the launcher create, adopt and delete the job's Secret
    request = make_request("kwok-rbac", hosts=2, annotations={PLAY + "run": "3s"}, secret_env={"TOKEN": "t0k3n-rbac"})
    hook.start(request)
    KubernetesLauncherHook().start(request)  # reattach
    event = asyncio_run_trigger(trigger_for(hook, request))  # the triggerer's watch, as this user
    assert event["status"] == "success", event
    result = hook.run(request, lines.append)  # reattaches to the complete Job and reads both logs in full
    assert result.succeeded, (result, lines[-10:])
    assert sum("/500 epoch=" in line for line in lines) == 1000, lines[-10:]  # both hosts' logs, via pods/log
    refused = KubernetesLauncherHook().run(
        make_request("kwok-rbac-psa", container_security_context={"allowPrivilegeEscalation": True}), [].append)
    assert "violates PodSecurity" in refused.failure_reason  # events are readable
    assert len(job_secrets(kube_admin["core"], kube_namespace, "kwok-rbac")) == 1
    hook.stop(request)
    wait_for("everything gone", lambda: gone(kube_admin, kube_namespace, "kwok-rbac"), 120)
    assert not job_secrets(kube_admin["core"], kube_namespace, "kwok-rbac")
    print(f"RBAC lifecycle: {time.monotonic() - started:.1f}s")


def asyncio_run_trigger(trigger) -> dict:
    """Run the trigger as the triggerer does: from its serialized form, until its one event."""
    import asyncio
    import importlib

    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # primitives only
    module, _, cls = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), cls)(**kwargs)

    async def first():
        async for event in rebuilt.run():
            return event.payload

    return asyncio.run(first())

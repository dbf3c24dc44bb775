"""The Kubernetes launcher's lifecycle with the real kubernetes / kubernetes_asyncio clients (through the
cncf-kubernetes provider's hooks and an Airflow connection) against a fake API server on loopback
(tests/fake_kube_api.py): create, wait through the trigger as the triggerer would, reattach after a
worker restart, every failure class, cleanup on kill, and pod logs without losing the last lines."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from fake_kube_api import FakeKubeApi  # noqa: E402

from operators.launch.base import EVICTED, IMAGE_ERROR, OOM, PLATFORM_ERROR, TIMEOUT, USER_ERROR, LaunchRequest
from operators.launch.kubernetes import launcher as launcher_module
from operators.launch.kubernetes.launcher import KubernetesLaunchError, KubernetesLauncherHook
from operators.launch.kubernetes.settings import KubernetesSettings
from operators.launch.registry import trigger_for
from operators.launch.names import resource_name

NAMESPACE = "training"


@pytest.fixture
def kube(tmp_path, monkeypatch):
    api = FakeKubeApi().start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(api.kubeconfig(NAMESPACE)))
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
    )
    yield api
    api.stop()


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "workspace"
    (path / "cache" / "c0ffee").mkdir(parents=True)
    return path


def make_request(workspace: Path, job_name="bert-finetune", hosts=1, **options) -> LaunchRequest:
    job_root = workspace / "jobs" / job_name
    (job_root / "output").mkdir(parents=True, exist_ok=True)
    name = resource_name(job_name)
    return LaunchRequest(
        job_name=job_name,
        job_root=str(job_root),
        workspace=str(workspace),
        layout="ti",
        instance_count=hosts,
        hosts=tuple(f"{name}-{i}.{name}" for i in range(hosts)),
        channel_entries={"train": str(workspace / "cache" / "c0ffee")},
        image_uri="registry.example.com/training-runtime:1.0",
        resources={"cpu": "1", "memory": "2Gi"},
        max_run_seconds=3600,
        env={"TM_LOG_LEVEL": "INFO"},
        options={"namespace": NAMESPACE, "poll_interval": 0.05, **options},
    )


def start_job(workspace: Path, **request_options) -> tuple[KubernetesLauncherHook, LaunchRequest, str]:
    """A Job started through the hook: (the hook, its request, the Job's Kubernetes name)."""
    hook = KubernetesLauncherHook()
    request = make_request(workspace, **request_options)
    hook.start(request)
    return hook, request, resource_name(request.job_name)


def rebuilt(trigger):
    """The trigger as the triggerer gets it: from its serialized form."""
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # primitives only
    module, _, cls = classpath.rpartition(".")
    return getattr(importlib.import_module(module), cls)(**kwargs)


async def until(predicate, timeout=60.0):  # a hang guard, not a speed bound
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def run_trigger(trigger, drive) -> dict:
    """Run the trigger's async run() in an event loop, as the triggerer does, while `drive` plays the cluster."""

    async def main():
        events = trigger.run()
        first = asyncio.ensure_future(events.__anext__())
        await drive()
        event = await asyncio.wait_for(first, 15)
        await events.aclose()
        return event.payload

    payload = asyncio.run(main())
    assert json.loads(json.dumps(payload)) == payload  # a TriggerEvent of primitives only
    return payload


class Output:
    """What the trigger writes to its log (shown in the task log), read from the captured stdout."""

    def __init__(self, capsys):
        self.capsys = capsys
        self.text = ""

    def read(self) -> str:
        self.text += self.capsys.readouterr().out
        return self.text

    def has(self, fragment: str) -> bool:
        return fragment in self.read()


def test_deferred_run_succeeds_and_no_log_line_is_lost_or_repeated(kube, workspace, capsys):
    hook = KubernetesLauncherHook()
    request = make_request(workspace, hosts=2)
    name = resource_name(request.job_name)
    assert hook.hosts(request.job_name, 2) == [f"{name}-0.{name}", f"{name}-1.{name}"]
    assert hook.host_addresses(request.job_name, 2) is None
    assert hook.capabilities.deferrable and hook.deferrable_default  # [training.kubernetes] deferrable = True

    hook.start(request)
    job = kube.job(name)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    service = kube.services[(NAMESPACE, name)]
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]  # goes with the Job
    pods = kube.pod_names(name)
    assert [kube.pod(p)["spec"]["hostname"] for p in pods] == [f"{name}-0", f"{name}-1"]

    out = Output(capsys)

    async def drive():
        for pod in pods:
            kube.set_running(pod)
        for epoch in range(1, 4):
            for index, pod in enumerate(pods):
                kube.log(pod, f"host {index} epoch {epoch} loss {1 / epoch:.3f}")
        # Both hosts' last epoch streamed (each host's lines arrive in order, the hosts' in any order: at load 8,
        # host 0's could still be in flight when host 1's arrived, and would then come through the catch-up).
        await until(lambda: out.has("host 0 epoch 3") and out.has("host 1 epoch 3"))
        for index, pod in enumerate(pods):
            # Written as the container exits: the open follow stream closes without them.
            kube.terminate(pod, 0, last_lines=(f"host {index} saved model", f"host {index} bye"))

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["status"] == "success"
    streamed = out.read()
    assert "host 0 saved model" not in streamed  # the follow stream did miss them ...

    lines: list[str] = []
    result = hook.result_from_event(request, event, lines.append)
    assert result.succeeded and result.exit_code == 0
    caught_up = [line for line in lines if not line.startswith("[kubernetes]")]
    assert caught_up == [  # ... and the catch-up passes on exactly the missing ones, with their host
        f"[{name}-0] host 0 saved model",
        f"[{name}-0] host 0 bye",
        f"[{name}-1] host 1 saved model",
        f"[{name}-1] host 1 bye",
    ]
    for index in range(2):
        for epoch in range(1, 4):
            assert streamed.count(f"host {index} epoch {epoch} ") == 1
    assert f"{name}-0 (pod {pods[0]}): Running" in streamed
    assert not kube.count("DELETE", "/jobs/")  # finished Jobs are left to ttlSecondsAfterFinished


def test_a_restarted_triggerer_continues_the_logs_where_the_stopped_one_left_them(kube, workspace, capsys):
    hook = KubernetesLauncherHook()
    request = make_request(workspace)
    hook.start(request)
    pod = kube.pod_names(resource_name(request.job_name))[0]
    out = Output(capsys)

    async def first_triggerer():  # runs the trigger until it is cancelled, as a triggerer shutting down does
        task = asyncio.ensure_future(rebuilt(trigger_for(hook, request)).run().__anext__())
        kube.set_running(pod)
        for step in range(5):
            kube.log(pod, f"step {step}")
        await until(lambda: out.has("step 4"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(first_triggerer())
    assert "log-cursors" in json.dumps(kube.job(resource_name(request.job_name))["metadata"]["annotations"])

    async def drive():  # the second triggerer recreates the trigger from the same serialized arguments
        for step in range(5, 8):
            kube.log(pod, f"step {step}")
        await until(lambda: out.has("step 7"))
        kube.terminate(pod, 0)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["status"] == "success"
    streamed = out.read()
    assert [streamed.count(f"] step {step} ") for step in range(8)] == [1] * 8, streamed
    assert "resuming the logs of 1 pod(s)" in streamed


def test_blocking_run_streams_every_line_into_on_line(kube, workspace):
    hook = KubernetesLauncherHook()
    request = make_request(workspace)
    name = resource_name(request.job_name)
    lines: list[str] = []
    results = []
    worker = threading.Thread(target=lambda: results.append(hook.run(request, lines.append)))
    worker.start()

    async def drive():
        await until(lambda: kube.pod_names(name))
        pod = kube.pod_names(name)[0]
        kube.set_running(pod)
        for step in range(50):
            kube.log(pod, f"step {step}")
        await until(lambda: "step 49" in lines)
        kube.terminate(pod, 0, last_lines=("final checkpoint written",))

    asyncio.run(drive())
    worker.join(15)
    assert results and results[0].succeeded
    training = [line for line in lines if not line.startswith("[kubernetes]")]
    assert training == [f"step {i}" for i in range(50)] + ["final checkpoint written"]


def test_restarted_worker_reattaches_instead_of_starting_a_second_job(kube, workspace):
    request = make_request(workspace, hosts=2)
    name = resource_name(request.job_name)
    KubernetesLauncherHook().start(request)  # the first worker, which then dies
    uid = kube.job(name)["metadata"]["uid"]
    pods = kube.pod_names(name)
    for pod in pods:
        kube.set_running(pod)
        kube.log(pod, "before the restart")

    hook = KubernetesLauncherHook()  # the retry, on another worker
    hook.start(request)
    assert kube.job(name)["metadata"]["uid"] == uid  # the same Job ...
    assert kube.pod_names(name) == pods  # ... the same pods
    assert len(kube.jobs) == 1 and kube.count("POST", "/jobs$") == 2  # second create answered 409

    async def drive():
        await asyncio.sleep(0.2)
        for pod in pods:
            kube.terminate(pod, 0)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    lines: list[str] = []
    assert hook.result_from_event(request, event, lines.append).succeeded


def test_a_failed_job_from_an_earlier_try_is_replaced_not_reported_again(kube, workspace):
    request = make_request(workspace)
    name = resource_name(request.job_name)
    hook = KubernetesLauncherHook()
    hook.start(request)
    first_uid = kube.job(name)["metadata"]["uid"]
    kube.terminate(kube.pod_names(name)[0], 1)  # FailJob
    failure = Path(request.job_root) / "output" / "failure"
    failure.write_text("ValueError: old failure")

    hook.start(request)
    job = kube.job(name)
    assert job["metadata"]["uid"] != first_uid and "conditions" not in job["status"]
    assert ("Job", name, "Foreground") in kube.deletions
    assert not failure.exists()  # the new Job is not judged by the earlier try's failure file


def test_a_foreign_job_with_the_same_name_is_not_taken_over(kube, workspace):
    request = make_request(workspace)
    name = resource_name(request.job_name)
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]}}},
    }
    kube.handle("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", {}, foreign)
    with pytest.raises(KubernetesLaunchError, match="was not created for training job 'bert-finetune'"):
        KubernetesLauncherHook().start(request)


def test_user_error_reports_exit_code_and_failure_file(kube, workspace):
    hook, request, name = start_job(workspace, hosts=2)
    pods = kube.pod_names(name)

    async def drive():
        for pod in pods:
            kube.set_running(pod)
        Path(request.job_root, "output", "failure").write_text("KeyError: 'label' in train.py line 42\n")
        kube.log(pods[0], "Traceback (most recent call last):", "KeyError: 'label'")
        kube.terminate(pods[0], 1, message="KeyError: 'label'")  # podFailurePolicy FailJob

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert (result.succeeded, result.failure_class, result.exit_code) == (False, USER_ERROR, 1)
    assert not result.retryable
    assert result.failure_reason == f"the training code failed on {name}-0, exit code 1: KeyError: 'label' in train.py line 42"
    assert "PodFailurePolicy" in json.dumps(kube.job(name)["status"]["conditions"])


def test_platform_error_is_retryable(kube, workspace):
    hook, request, name = start_job(workspace, backoff_limit=0)
    pod = kube.pod_names(name)[0]

    async def drive():
        kube.set_running(pod)
        kube.terminate(pod, 4)  # counts against backoffLimit 0 -> BackoffLimitExceeded

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert (result.failure_class, result.exit_code, result.retryable) == (PLATFORM_ERROR, 4, True)


def test_oom_fails_fast_and_stops_the_job(kube, workspace):
    hook = KubernetesLauncherHook()
    request = make_request(workspace, hosts=1)  # one host: backoffLimit would have Kubernetes retry the pod
    name = resource_name(request.job_name)
    hook.start(request)
    pods = kube.pod_names(name)

    async def drive():
        for pod in pods:
            kube.set_running(pod)
        kube.terminate(pods[0], 137, reason="OOMKilled")

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["job_finished"] is False  # the Job controller would retry it: we do not wait for that
    result = hook.result_from_event(request, event, lambda line: None)
    assert (result.failure_class, result.exit_code) == (OOM, 137)
    assert f"{name}-0 ran out of memory" in result.failure_reason and "resources.memory" in result.failure_reason
    assert not kube.jobs and not kube.services and not kube.pod_names(name)  # nothing left running


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("ErrImagePull", 'failed to pull image "registry.example.com/training-runtime:1.0": not found'),
        ("ImagePullBackOff", 'Back-off pulling image "registry.example.com/training-runtime:1.0"'),
        ("InvalidImageName", 'Failed to apply default image tag "Registry/UPPER:": invalid reference format'),
    ],
)
def test_image_errors_fail_fast_with_a_clear_message(kube, workspace, reason, message):
    hook, request, name = start_job(workspace)

    async def drive():
        kube.set_waiting(kube.pod_names(name)[0], reason, message)

    started = time.monotonic()
    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert time.monotonic() - started < 5
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == IMAGE_ERROR and not result.retryable
    assert f"cannot pull its image ({reason})" in result.failure_reason and message in result.failure_reason
    assert not kube.jobs  # stopped: the kubelet would keep pulling forever


def test_a_registry_rate_limit_is_waited_out(kube, workspace, capsys):
    hook, request, name = start_job(workspace)
    pod = kube.pod_names(name)[0]
    out = Output(capsys)
    limit = "toomanyrequests: You have reached your unauthenticated pull rate limit"

    async def drive():
        kube.set_waiting(pod, "ErrImagePull", limit)
        await until(lambda: out.has("the registry refuses to serve the image for now"))
        kube.set_waiting(pod, "ImagePullBackOff", 'Back-off pulling image "registry.example.com/training-runtime:1.0"')
        await asyncio.sleep(0.3)  # several polls: still waiting, not failed
        kube.set_running(pod)
        kube.terminate(pod, 0)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["status"] == "success"


def test_a_rate_limit_that_outlasts_the_grace_period_fails(kube, workspace):
    hook, request, name = start_job(workspace, image_pull_grace_seconds=0)

    async def drive():
        kube.set_waiting(kube.pod_names(name)[0], "ErrImagePull", "429 Too Many Requests: toomanyrequests")

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == IMAGE_ERROR and "still rate-limited" in result.failure_reason


def test_an_evicted_pod_is_replaced_and_the_job_goes_on(kube, workspace, capsys):
    hook, request, name = start_job(workspace)
    first = kube.pod_names(name)[0]
    out = Output(capsys)

    async def drive():
        kube.set_running(first)
        kube.evict(first)  # DisruptionTarget -> Ignore: a replacement pod, not counted as a failure
        await until(lambda: len(kube.pod_names(name)) == 2)
        second = kube.pod_names(name)[1]
        kube.set_running(second)
        kube.log(second, "resumed from checkpoint step 300")
        await until(lambda: out.has("resumed from checkpoint"))
        kube.terminate(second, 0)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["status"] == "success"
    assert f"{name}-0 (pod {first}) was evicted or preempted (TerminationByKubelet" in out.read()


def test_a_failure_after_an_eviction_is_retryable(kube, workspace):
    hook, request, name = start_job(workspace, hosts=2)
    pods = kube.pod_names(name)

    async def drive():
        for pod in pods:
            kube.set_running(pod)
        kube.evict(pods[1], reason="PreemptionByScheduler", by_kubelet=False)
        await asyncio.sleep(0.2)
        kube.terminate(pods[0], 1)  # rank 0 lost its peer: the script fails, FailJob

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == EVICTED and result.retryable
    assert "PreemptionByScheduler" in result.failure_reason


def test_max_run_seconds_is_a_timeout(kube, workspace):
    hook, request, name = start_job(workspace)
    assert kube.job(name)["spec"]["activeDeadlineSeconds"] == 3600

    async def drive():
        kube.set_running(kube.pod_names(name)[0])
        kube.expire_deadline(name)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == TIMEOUT and "max_run_seconds" in result.failure_reason


def test_a_pod_on_a_node_that_never_starts_its_container_fails_as_a_platform_error(kube, workspace):
    # A node that cannot create the pod's sandbox (runtime, CNI, volumes) leaves it in ContainerCreating for ever,
    # and Kubernetes never fails the Job: without startup_timeout_seconds the task waited until max_run_seconds.
    hook, request, name = start_job(workspace, startup_timeout_seconds=1)
    pod = kube.pod_names(name)[0]

    async def drive():
        kube.set_waiting(pod, "ContainerCreating")

    started = time.monotonic()
    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == PLATFORM_ERROR, result.failure_reason  # retryable: another try, maybe another node
    assert f"pod {pod}) is on node" in result.failure_reason and "has not started its container" in result.failure_reason
    assert "startup_timeout_seconds" in result.failure_reason and "(ContainerCreating" in result.failure_reason
    assert time.monotonic() - started < 10
    assert not kube.jobs and not kube.pod_names(name)  # the stuck Job is deleted


def test_waiting_for_a_node_is_not_a_failed_start(kube, workspace):
    hook, request, name = start_job(workspace, startup_timeout_seconds=1)
    pod = kube.pod_names(name)[0]

    async def drive():
        kube.set_unschedulable(pod, "0/3 nodes are available: 3 Insufficient cpu.")
        await asyncio.sleep(2.5)  # longer than startup_timeout_seconds: capacity is waited for
        kube.set_running(pod)
        kube.terminate(pod, 0)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["status"] == "success", event


def test_a_missing_secret_fails_fast(kube, workspace):
    hook, request, name = start_job(workspace, secret_env={"HF_TOKEN": "hf/token"})

    async def drive():
        kube.set_waiting(kube.pod_names(name)[0], "CreateContainerConfigError", 'secret "hf" not found')

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == USER_ERROR and 'secret "hf" not found' in result.failure_reason


def test_a_secret_the_kubelet_has_not_synced_yet_is_waited_for(kube, workspace):
    """On a loaded node the kubelet may not have the Secret made a moment before the pod in its cache yet: it says
    CreateContainerConfigError and tries again. Only a missing Secret or key fails fast (above)."""
    hook, request, name = start_job(workspace, secret_env={"HF_TOKEN": "hf/token"})
    pod = kube.pod_names(name)[0]

    async def drive():
        kube.set_waiting(pod, "CreateContainerConfigError",
                         "failed to sync secret cache: timed out waiting for the condition")
        await asyncio.sleep(0.5)  # several polls of the watch
        kube.set_running(pod)
        kube.terminate(pod, 0)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["status"] == "success", event


def test_a_missing_workspace_claim_fails_fast(kube, workspace):
    hook, request, name = start_job(workspace)

    async def drive():
        kube.set_unschedulable(kube.pod_names(name)[0], 'persistentvolumeclaim "training-workspace" not found')

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == USER_ERROR and "create the ReadWriteMany claim 'training-workspace'" in result.failure_reason
    assert not kube.jobs


def test_a_job_deleted_behind_our_back_is_a_platform_error(kube, workspace):
    hook, request, name = start_job(workspace)

    async def drive():
        kube.set_running(kube.pod_names(name)[0])
        kube.handle("DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}", {}, None)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == PLATFORM_ERROR and "no longer exists" in result.failure_reason


def test_a_job_our_own_stop_deleted_is_reported_as_stopped(kube, workspace):
    # Blocking mode: on_kill (SIGTERM in the worker) calls stop() while run() watches; the watch then finds no Job.
    hook, request, name = start_job(workspace)

    async def drive():
        kube.set_running(kube.pod_names(name)[0])
        hook.stop(request)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.failure_class == PLATFORM_ERROR and "stopped by this task" in result.failure_reason
    assert "no longer exists" not in result.failure_reason


def test_unschedulable_pods_are_reported_once(kube, workspace, capsys):
    hook, request, name = start_job(workspace)
    pod = kube.pod_names(name)[0]
    out = Output(capsys)
    why = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."

    async def drive():
        kube.set_unschedulable(pod, why)
        await asyncio.sleep(0.3)
        kube.set_running(pod)
        kube.terminate(pod, 0)

    run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert out.read().count(why) == 1


def test_stop_deletes_the_job_its_pods_and_the_service(kube, workspace):
    hook, request, name = start_job(workspace, hosts=4)
    for pod in kube.pod_names(name):
        kube.set_running(pod)

    hook.stop(request)
    assert not kube.jobs and not kube.services and not kube.pod_names(name)
    assert ("Job", name, "Foreground") in kube.deletions
    hook.stop(request)  # idempotent: nothing left is fine


def test_killing_the_deferred_task_deletes_everything(kube, workspace):
    hook, request, name = start_job(workspace, propagation_policy="Background")
    trigger = rebuilt(trigger_for(hook, request))
    asyncio.run(trigger.on_kill())  # what the triggerer calls when a user marks the task failed
    assert not kube.jobs and not kube.services and not kube.pod_names(name)
    assert ("Job", name, "Background") in kube.deletions


def test_hosts_that_are_not_the_pods_names_are_refused(kube, workspace):
    request = make_request(workspace, hosts=2)
    request = LaunchRequest.from_dict({**request.to_dict(), "hosts": ["algo-1", "algo-2"]})
    with pytest.raises(ValueError, match="write resourceconfig.json with the launcher's hosts"):
        KubernetesLauncherHook().start(request)
    assert not kube.count("POST", "/jobs$")


def test_a_literal_credential_never_reaches_the_cluster(kube, workspace):
    request = make_request(workspace)
    request = LaunchRequest.from_dict({**request.to_dict(), "env": {"WANDB_API_KEY": "0123456789abcdef"}})
    with pytest.raises(ValueError, match="WANDB_API_KEY looks like a credential"):
        KubernetesLauncherHook().start(request)
    assert not kube.count("POST", "/jobs$")


def test_a_failed_start_names_the_pods_latest_warning():
    from kubernetes.client import (V1ContainerState, V1ContainerStateWaiting, V1ContainerStatus, CoreV1Event,
                                   V1ObjectMeta, V1ObjectReference, V1Pod, V1PodCondition, V1PodSpec, V1PodStatus)

    from operators.launch.kubernetes.watch import JobWatch

    pod = V1Pod(metadata=V1ObjectMeta(name="job-0-abcde", uid="pod-uid", annotations={}),
                spec=V1PodSpec(containers=[], node_name="node-7"),
                status=V1PodStatus(phase="Pending", conditions=[V1PodCondition(type="PodScheduled", status="True")],
                                   container_statuses=[V1ContainerStatus(
                                       name="train", image="i", image_id="", ready=False, restart_count=0,
                                       state=V1ContainerState(waiting=V1ContainerStateWaiting(
                                           reason="ContainerCreating")))]))
    sandbox = CoreV1Event(metadata=V1ObjectMeta(name="e"), involved_object=V1ObjectReference(uid="pod-uid"),
                      reason="FailedCreatePodSandBox", message='failed to get sandbox image "pause": not found')
    watch = JobWatch(None, name="job", namespace="ns", instance_count=1, poll_interval=1, image_pull_grace_seconds=1,
                     startup_timeout_seconds=30, emit=lambda line: None)
    watch.warnings([sandbox], [pod])
    assert watch.fail_fast([pod]) is None  # first seen now: not yet
    watch.starting_since["job-0-abcde"] -= 31
    failure = watch.fail_fast([pod])
    assert failure["failure_class"] == PLATFORM_ERROR and failure["job_finished"] is False
    assert "on node node-7" in failure["message"]
    assert 'last warning: FailedCreatePodSandBox: failed to get sandbox image "pause": not found' in failure["message"]


def test_points_echoed_into_the_log_reach_the_event_and_not_the_task_log(kube, workspace, capsys):
    """The cluster's data plane: the worker cannot read output/metrics.jsonl, so `train` echoes its points into the
    log (runtime/training_runtime/metrics_echo.py); the trigger takes them as metrics and does not show them."""
    from operators.launch.kubernetes.trigger import KubernetesTrainingJobTrigger

    hook = KubernetesLauncherHook()
    request = make_request(workspace, hosts=2)
    hook.start(request)
    arguments = {**hook.trigger_arguments(request), "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    assert arguments["metrics_echoed"] is False  # a shared volume: the worker reads the file itself
    trigger = rebuilt(KubernetesTrainingJobTrigger(**{**arguments, "metrics_echoed": True}))
    pods = kube.pod_names(resource_name(request.job_name))
    out = Output(capsys)

    async def drive():
        for pod in pods:
            kube.set_running(pod)
        kube.log(pods[0], "epoch 1 loss=0.5")
        kube.log(pods[0], '[training-metric] {"name": "accuracy", "value": 0.75, "step": 1}')
        kube.log(pods[0], '[training-metric] {"name": "system/algo-2/cpu_percent", "value": 93.5}')
        kube.log(pods[0], '[training-metric] {"name": "bad", "value": "NaN"}')  # the tenant's: checked, dropped
        kube.log(pods[0], "[training-metric] " + "[" * 5000)  # nested past the parser's depth: dropped, no error
        await until(lambda: out.has("epoch 1 loss=0.5"))
        for pod in pods:
            kube.terminate(pod, 0)

    event = run_trigger(trigger, drive)
    assert event["status"] == "success"
    assert {name: [p["value"] for p in points] for name, points in event["metrics"].items()} == \
        {"loss": [0.5], "accuracy": [0.75], "system/algo-2/cpu_percent": [93.5]}
    assert "training-metric" not in out.read()


def test_a_deferred_task_s_series_are_recorded_as_its_xcom_while_the_job_trains(kube, workspace, capsys, monkeypatch):
    """The cluster's data plane has no metrics.json on Airflow's side: while the task is deferred, the trigger records
    the series so far as the task's XCom metric_series (the job page's curves), only when they grew. (Airflow's XCom
    stands in here; the trigger's record in a real `airflow dags test`: tests/integration/test_kubernetes_cluster_data_plane.py.)"""
    from airflow.sdk.execution_time.xcom import XCom

    from operators.launch.kubernetes import trigger as trigger_module
    from operators.tracking import live_series

    recorded: list[dict] = []

    monkeypatch.setattr(XCom, "set", lambda **kwargs: recorded.append(kwargs))
    monkeypatch.setattr(live_series, "LIVE_SERIES_SECONDS", 0.05)
    hook = KubernetesLauncherHook()
    request = make_request(workspace)
    hook.start(request)
    task = {"dag_id": "training_job", "task_id": "launch_training", "run_id": "r1", "map_index": -1}
    arguments = {**hook.trigger_arguments(request), "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    trigger = rebuilt(trigger_module.KubernetesTrainingJobTrigger(**arguments, series_xcom=task))
    (pod,) = kube.pod_names(resource_name(request.job_name))
    out = Output(capsys)

    async def drive():
        kube.set_running(pod)
        kube.log(pod, "epoch 1 loss=0.5")
        await until(lambda: recorded)
        await asyncio.sleep(0.3)  # nothing new: nothing recorded again
        assert len(recorded) == 1
        kube.log(pod, "epoch 2 loss=0.25")
        await until(lambda: len(recorded) == 2)
        kube.terminate(pod, 0)

    event = run_trigger(trigger, drive)
    assert event["status"] == "success" and out.has("epoch 2 loss=0.25")
    assert [{k: v for k, v in r.items() if k != "value"} for r in recorded] == [{"key": "metric_series", **task}] * 2
    assert [p["value"] for p in recorded[-1]["value"]["series"]["loss"]] == [0.5, 0.25]
    assert recorded[-1]["value"]["final"] == {"loss": 0.25}
    assert "series_xcom" not in hook.trigger_arguments(request)  # the operator's to give (a shared volume: none)


def test_with_the_clusters_data_plane_only_a_retry_asks_whether_a_launch_the_ttl_removed_succeeded(kube, workspace,
                                                                                                    monkeypatch):
    # The worker cannot read the job root there: a step in the cluster answers (its real run on the real node:
    # tests/integration/test_kubernetes_cluster_data_plane.py). Asked only by a retry (a first try launched nothing)
    # and by a result whose Job is gone; its yes means no second training.
    asked: list[tuple[str, str]] = []
    answer = {"value": True}

    def succeeded_in_cluster(kube_hook, options, job_name, job_root, state, on_line):
        asked.append((job_root, state))
        return answer["value"]

    monkeypatch.setattr(launcher_module, "succeeded_in_cluster", succeeded_in_cluster)
    settings = KubernetesSettings(namespace=NAMESPACE, data_plane="cluster",
                                  data_plane_image="registry.example.com/training-airflow:1.0")
    request = make_request(workspace)
    name = resource_name(request.job_name)

    KubernetesLauncherHook(settings=settings).start(request)  # the first try: no question, a Job
    assert not asked and kube.count("POST", "/jobs$") == 1
    kube.jobs.clear()  # ttlSecondsAfterFinished

    retry = replace(request, attempt=2)
    KubernetesLauncherHook(settings=settings).start(retry)
    assert asked == [(request.job_root, str(workspace / "state" / request.job_name))]
    assert kube.count("POST", "/jobs$") == 1  # reported, not trained again
    gone = {"status": "failed", "job_missing": True, "name": name, "namespace": NAMESPACE,
            "message": f"Job {name} was deleted", "failure_class": PLATFORM_ERROR}
    lines: list[str] = []
    assert KubernetesLauncherHook(settings=settings).result_from_event(retry, gone, lines.append).succeeded
    assert "its success marker says it succeeded" in lines[-1]

    answer["value"] = False  # no success marker since the launch: the retry trains
    KubernetesLauncherHook(settings=settings).start(retry)
    assert kube.count("POST", "/jobs$") == 2 and (NAMESPACE, name) in kube.jobs


def test_checkpoints_sync_from_a_pod_of_their_own_ready_before_the_training_and_ended_after_it(kube, workspace):
    """The cluster's data plane with a checkpoint_path: the sync holds the platform's storage identity, so it runs in
    a Job of its own (never in the training's pod), is ready (knows what was restored) before the training Job is
    created, belongs to it, and is ended after it with its last pass in the task's log. A retry that reattaches to
    the training finds a sync beside it again. (On the real node: tests/integration/test_kubernetes_cluster_data_plane.py.)"""
    from operators.launch.kubernetes.checkpoint_sync import CheckpointSyncJob
    from operators.launch.kubernetes.data_plane import platform_identity_problems
    from operators.launch.kubernetes.options import resolve_options

    settings = KubernetesSettings(namespace=NAMESPACE, data_plane="cluster", storage_secret="training-storage",
                                  data_plane_service_account="storage-writer",
                                  data_plane_image="registry.example.com/training-airflow:1.0")
    base = make_request(workspace)
    request = replace(base, checkpoints={"dir": f"{base.job_root}/checkpoints", "uri": "s3://ckpt/bert/",
                                         "job_root": base.job_root, "interval": 1, "connections": {}})
    name, sync = resource_name(request.job_name), resource_name(f"{request.job_name}-checkpoint-sync")
    seen: dict = {}

    def sync_becomes_ready() -> None:
        deadline = time.monotonic() + 60  # a hang guard
        while not kube.pod_names(sync):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        seen["training pods while the sync starts"] = kube.pod_names(name)
        kube.set_running(kube.pod_names(sync)[0])

    helper = threading.Thread(target=sync_becomes_ready)
    helper.start()
    KubernetesLauncherHook(settings=settings).start(request)
    helper.join()
    assert seen["training pods while the sync starts"] == []  # the training waited for the sync to be ready
    assert [key[1] for key in kube.jobs] == [sync, name]
    training, sync_job = kube.job(name), kube.job(sync)
    assert [ref["uid"] for ref in sync_job["metadata"]["ownerReferences"]] == [training["metadata"]["uid"]]
    training_pod = training["spec"]["template"]["spec"]
    assert [c["name"] for c in training_pod["initContainers"]] == ["prepare-job-root"]
    assert platform_identity_problems(training_pod, resolve_options({}, settings)) == []
    sync_pod = sync_job["spec"]["template"]["spec"]
    assert sync_pod["serviceAccountName"] == "storage-writer"
    assert sync_pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "training-storage"}}]

    # The training ended: the sync's Job is deleted (its pod gets SIGTERM and makes its last pass while the grace
    # period lasts: played here by the fake kubelet), and its log reaches the task's.
    pod = kube.pod_names(sync)[0]
    kube.log(pod, "INFO checkpoint sync: Checkpoints: 2 file(s) synced to s3://ckpt/bert/")
    deleted = []

    def kubelet_ends_the_pod(self) -> None:
        deleted.append(self.name)
        kube.log(pod, "INFO operators.engine.checkpoint_sync: checkpoint sync: the last pass is done")
        kube.terminate(pod, 0)

    original_delete = CheckpointSyncJob.delete
    CheckpointSyncJob.delete = kubelet_ends_the_pod
    try:
        lines: list[str] = []
        result = KubernetesLauncherHook(settings=settings).result_from_event(
            request, {"status": "success", "name": name, "namespace": NAMESPACE}, lines.append)
    finally:
        CheckpointSyncJob.delete = original_delete
    assert result.succeeded and deleted == [sync]
    assert "[checkpoint-sync] INFO checkpoint sync: Checkpoints: 2 file(s) synced to s3://ckpt/bert/" in lines
    assert lines[-1] == "[cluster] checkpoint sync: every checkpoint is in s3://ckpt/bert/", lines

    # A retry reattaches to the training Job (still running) whose sync is gone: a new one, uploading everything
    # there (nothing in it was restored by this try), owned by the training Job; no second training.
    del kube.jobs[(NAMESPACE, sync)]
    for key in [key for key in kube.pods if key[1].startswith(sync)]:
        del kube.pods[key]
    KubernetesLauncherHook(settings=settings).start(replace(request, attempt=2))
    config = {e["name"]: e["value"] for e in kube.job(sync)["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(config["TRAINING_CHECKPOINT_SYNC"])["mark_existing"] is False
    assert kube.job(sync)["metadata"]["ownerReferences"][0]["uid"] == training["metadata"]["uid"]
    assert kube.job(name)["metadata"]["uid"] == training["metadata"]["uid"]  # the same training, not a second

    KubernetesLauncherHook(settings=settings).stop(request)  # on_kill: both go
    assert ("Job", sync, "Background") in kube.deletions and (NAMESPACE, name) not in kube.jobs


DIGEST = "sha256:" + "0123456789abcdef" * 4
OTHER_DIGEST = "sha256:" + "f" * 64


def test_the_result_names_the_image_the_pods_ran_host_0_s_when_they_differ(kube, workspace, capsys):
    hook, request, name = start_job(workspace, hosts=2)
    pods = kube.pod_names(name)
    out = Output(capsys)

    async def drive():
        kube.set_running(pods[1], image_id=f"registry.example.com/training-runtime@{OTHER_DIGEST}")
        await until(lambda: out.has(f"{name}-1 (pod {pods[1]}): Running"))
        kube.set_running(pods[0], image_id=f"registry.example.com/training-runtime@{DIGEST}")
        for pod in pods:
            kube.terminate(pod, 0)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)
    assert event["image_digest"] == f"registry.example.com/training-runtime@{DIGEST}"  # rank 0's, the pod's imageID
    result = hook.result_from_event(request, event, lambda line: None)
    assert result.succeeded and result.image_digest == event["image_digest"]
    warnings = [line for line in out.read().splitlines() if "the job's pods run different images" in line]
    assert len(warnings) == 1 and OTHER_DIGEST in warnings[0] and DIGEST in warnings[0], warnings


def test_a_run_pinned_to_another_image_fails_as_an_image_error_and_its_job_is_stopped(kube, workspace):
    hook, request, name = start_job(workspace)
    request = replace(request, expected_image_digest=DIGEST)
    ran = f"docker-pullable://registry.example.com/training-runtime@{OTHER_DIGEST}"

    async def drive():
        kube.set_running(kube.pod_names(name)[0], image_id=ran)

    event = run_trigger(rebuilt(trigger_for(hook, request)), drive)  # the pin survives the trigger's serialization
    assert event["job_finished"] is False
    result = hook.result_from_event(request, event, lambda line: None)
    assert (result.failure_class, result.retryable, result.image_digest) == (IMAGE_ERROR, False, ran)
    assert result.failure_reason == (
        f"image registry.example.com/training-runtime:1.0 is {ran}, not {DIGEST} that the reproduced run ran; push or "
        "pull that image again (or point image_uri at it), or reproduce without pinning the image")
    assert not kube.jobs and not kube.pod_names(name)  # stopped: it must not train on another image


def test_a_run_pinned_to_the_image_it_runs_trains_whatever_form_the_kubelet_writes_the_digest_in(kube, workspace):
    hook, request, name = start_job(workspace)
    request = replace(request, expected_image_digest=DIGEST)  # Docker's image id form
    lines: list[str] = []
    results = []
    worker = threading.Thread(target=lambda: results.append(hook.run(request, lines.append)))  # blocking mode
    worker.start()

    async def drive():
        pod = kube.pod_names(name)[0]
        kube.set_running(pod, image_id=f"docker.io/library/training-runtime@{DIGEST}")
        await until(lambda: any("Running" in line for line in lines))
        kube.terminate(pod, 0)

    asyncio.run(drive())
    worker.join(15)
    assert results and results[0].succeeded, results
    assert results[0].image_digest == f"docker.io/library/training-runtime@{DIGEST}"

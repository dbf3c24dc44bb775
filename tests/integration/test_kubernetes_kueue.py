"""Queues, quotas and all-or-nothing admission through Kueue, against the real local control plane (tools/k8s) and
the real Kueue controller (built from sigs.k8s.io/kueue, tools/kueue), with kwok's node: pods "run" for the
duration of their `run` annotation (tools/k8s/kwok/pod-stages.yaml). Each test gets its own namespace and a
ClusterQueue of 2 CPUs (kueue_queues), so a 2-host job of 1 CPU a host takes the whole quota."""

from __future__ import annotations

import re
import threading
import time

import pytest
from kubernetes.client.rest import ApiException

import kueue
from kube_cluster import PLAY, make_queues
from operators.launch.kubernetes.launcher import KubernetesLauncherHook
from operators.launch.registry import trigger_for
from operators.launch.base import USER_ERROR
from test_kubernetes_local_cluster import asyncio_run_trigger, gone, job_pods, make_request, wait_for

pytestmark = pytest.mark.cluster
QUOTA = {"cpu": "2", "memory": "8Gi"}


@pytest.fixture
def kueue_queues(kube_cluster, kube_admin, kube_namespace, monkeypatch):
    """A ClusterQueue of QUOTA for this test's namespace, its LocalQueues team-a and team-b, the priorities low and
    high; the admin's lists in [training.kubernetes] name them."""
    make_queues(kube_cluster, kube_admin["api"], kube_namespace, QUOTA)
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__QUEUES", "team-a,team-b")
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__QUEUE_PRIORITIES", "low,high")
    yield kube_namespace
    kueue.delete_cluster_queue(kube_admin["api"], kube_namespace)


class Launch(threading.Thread):
    """hook.run() of one request in a thread (the same JobWatch the trigger runs), its lines kept."""

    def __init__(self, request):
        super().__init__(daemon=True)
        self.request, self.lines, self.result, self.error = request, [], None, None

    def run(self):
        try:
            self.result = KubernetesLauncherHook().run(self.request, self.lines.append)  # creates, then waits
        except Exception as err:  # noqa: BLE001 - the test reports it
            self.error = err

    def outcome(self, timeout: float = 120):
        self.join(timeout)
        assert not self.is_alive(), f"{self.request.job_name} still running after {timeout:.0f}s: {self.lines[-10:]}"
        assert self.error is None, (self.error, self.lines[-20:])
        return self.result

    def said(self, pattern: str) -> list[str]:
        return [line for line in list(self.lines) if re.search(pattern, line)]


def test_a_two_host_job_is_admitted_whole_and_runs_through_the_trigger(kueue_queues, kube_admin):
    started = time.monotonic()
    batch = kube_admin["batch"]
    request = make_request("kq-whole", hosts=2, annotations={PLAY + "run": "2s"}, queue="team-a")
    hook = KubernetesLauncherHook()
    hook.start(request)
    job = batch.read_namespaced_job("kq-whole", kueue_queues)
    assert job.metadata.labels["kueue.x-k8s.io/queue-name"] == "team-a"
    event = asyncio_run_trigger(trigger_for(hook, request))  # the wait happens in the triggerer's watch
    assert event["status"] == "success", event
    pods = job_pods(kube_admin["core"], kueue_queues, "kq-whole")
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    print(f"2-host job admitted whole: {time.monotonic() - started:.1f}s")


def test_jobs_wait_in_the_queue_while_the_quota_is_used_with_their_position_and_run_when_it_frees(kueue_queues):
    started = time.monotonic()
    # The first holds the quota for 30 s: long enough for the second and the third to be created and seen waiting
    # behind it on a machine at load 8 (each launch creates its Job and polls Kueue's Workloads, seconds apiece).
    first = Launch(make_request("kq-first", hosts=2, annotations={PLAY + "run": "30s"}, queue="team-a"))
    first.start()
    wait_for("the first job admitted", lambda: first.said(r"admitted by Kueue in team-a"), 60)
    # The second runs long enough for the watch to see the third at position 1 meanwhile (one poll at load 8 can take
    # seconds: with 1 s the third went from position 2 to admitted between two polls).
    second = Launch(make_request("kq-second", hosts=2, annotations={PLAY + "run": "8s"}, queue="team-a"))
    second.start()
    wait_for("the second job queued", lambda: second.said(r"queued in team-a \(position 1, waiting for cpu"), 60)
    # Kueue orders Workloads of one priority by their creation time, in whole seconds, then by UID: the third must
    # be created in a later second than the second's Workload (which exists now) to queue behind it.
    time.sleep(1.0)
    third = Launch(make_request("kq-third", hosts=2, annotations={PLAY + "run": "1s"}, queue="team-a"))
    third.start()
    wait_for("the third job queued behind it", lambda: third.said(r"queued in team-a \(position 2, "), 60)
    assert not second.said("admitted") and not second.said(r"\(pod ")  # no pod of a queued job exists
    for launch in (first, second, third):
        result = launch.outcome()
        assert result.succeeded, (launch.request.job_name, result, launch.lines[-20:])
    assert third.said(r"position 1, "), third.lines  # moved up when the second was admitted
    print("\n".join(third.said(r"queued|admitted")))
    print(f"three jobs through one quota: {time.monotonic() - started:.1f}s")


def test_a_higher_priority_job_preempts_a_lower_one_which_resumes_afterwards(kueue_queues, kube_admin):
    started = time.monotonic()
    low = Launch(make_request("kq-low", hosts=2, annotations={PLAY + "run": "15s"}, queue="team-a",
                              queue_priority="low"))
    low.start()
    wait_for("the low-priority job running", lambda: low.said(r"kq-low-1 \(pod .*\): Running"), 60)
    first_pods = {p.metadata.uid for p in job_pods(kube_admin["core"], kueue_queues, "kq-low")}
    # the high one runs 6 s: the preempted job's watch sees it queued again meanwhile, even when a poll takes seconds
    high = Launch(make_request("kq-high", hosts=2, annotations={PLAY + "run": "6s"}, queue="team-b",
                               queue_priority="high"))
    high.start()
    assert high.outcome().succeeded, high.lines[-20:]
    result = low.outcome()
    assert result.succeeded, (result, low.lines[-30:])
    assert low.said(r"preempted in team-a"), low.lines
    assert low.said(r"queued in team-a \(position 1, waiting for "), low.lines  # back in the queue, with its place
    print("\n".join(low.said(r"queued|preempted|admitted")))
    assert not low.said(r"failed|evicted or preempted \("), low.lines  # reported as preempted, not as a failure
    resumed = {p.metadata.uid for p in job_pods(kube_admin["core"], kueue_queues, "kq-low")}
    assert resumed and not resumed & first_pods  # every host started afresh (from the checkpoint)
    print(f"preemption and resume: {time.monotonic() - started:.1f}s")


def test_a_job_larger_than_the_quota_fails_at_once_naming_the_quota(kueue_queues, kube_admin):
    started = time.monotonic()
    request = make_request("kq-huge", hosts=3, annotations={PLAY + "run": "1s"}, queue="team-a")
    launch = Launch(request)
    launch.start()
    result = launch.outcome(60)
    assert not result.succeeded and result.failure_class == USER_ERROR, result
    assert re.search(r"asks for 3 cpu but queue team-a's quota .* is 2 cpu", result.failure_reason), result
    wait_for("the refused Job deleted", lambda: gone(kube_admin, kueue_queues, "kq-huge"), 120)
    print(f"over quota refused: {time.monotonic() - started:.1f}s")


def test_a_queue_the_admin_did_not_list_is_refused_before_anything_is_created(kueue_queues, kube_admin):
    with pytest.raises(ValueError, match=r"kubernetes option 'queue' is 'team-z', not one of the admin's queues"):
        KubernetesLauncherHook().start(make_request("kq-unlisted", queue="team-z"))
    assert gone(kube_admin, kueue_queues, "kq-unlisted")


def test_a_queued_job_runs_as_a_client_bound_only_to_the_documented_role(kueue_queues, kube_cluster, kube_admin,
                                                                       monkeypatch):
    """The Role of docs/kubernetes.md (workloads get/list/watch included) is enough to queue a Job, see its position
    and follow it to the end: the queue lines come from Workloads this user may list."""
    import json

    from test_kubernetes_local_cluster import docs_role

    role = docs_role(kueue_queues)
    kube_admin["rbac"].create_namespaced_role(kueue_queues, role)
    kube_admin["rbac"].create_namespaced_role_binding(kueue_queues, {
        "metadata": {"name": "airflow-training-launcher"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "airflow-launcher"}]})
    kubeconfig = kube_cluster.user_kubeconfig("airflow-launcher")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}))
    first = Launch(make_request("kq-rbac-first", hosts=2, annotations={PLAY + "run": "5s"}, queue="team-a"))
    first.start()
    wait_for("the first job admitted", lambda: first.said(r"admitted by Kueue in team-a"), 60)
    second = Launch(make_request("kq-rbac-second", hosts=2, annotations={PLAY + "run": "1s"}, queue="team-a"))
    second.start()
    wait_for("the second job's position", lambda: second.said(r"queued in team-a \(position 1, "), 60)
    assert first.outcome().succeeded and second.outcome().succeeded, (first.lines[-10:], second.lines[-10:])
    assert not second.said("may not list Kueue Workloads")


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.timeout(600)  # an Airflow start-up plus a DAG run
def test_a_spec_picks_a_listed_queue_and_priority_through_airflow_dags_test(kueue_queues, kube_admin, tmp_path):
    """The spec's kubernetes.queue / queue_priority, validated by the first task, reach the Job through the DAG."""
    from test_kubernetes_local_cluster_dag import dags_test

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('kwok plays this container')\n")
    conf = {"job_name": "kq-dag", "backend": "kubernetes", "image_uri": "training-base:latest", "source_dir": str(code),
            "entry_point": "train.py", "output_path": str(tmp_path / "out"), "instance_count": 2,
            "resources": {"cpu": "1", "memory": "1Gi"},
            "kubernetes": {"queue": "team-b", "queue_priority": "high", "annotations": {PLAY + "run": "1s"},
                           "keep_finished_jobs": True}}
    state, states, _, output, seconds = dags_test(conf)
    assert state == "success", (states, output[-4000:])
    assert "admitted by Kueue in team-b" in output, output[-4000:]
    labels = kube_admin["batch"].read_namespaced_job("kq-dag", kueue_queues).metadata.labels
    assert (labels["kueue.x-k8s.io/queue-name"], labels["kueue.x-k8s.io/priority-class"]) == ("team-b", "high")
    print(f"queued DAG run: {seconds:.1f}s")


@pytest.mark.timeout(900)  # an Airflow deployment's start-up plus two DAG runs
def test_a_queued_jobs_page_says_where_it_waits_and_its_place_while_the_task_is_deferred(kube_cluster, kube_admin,
                                                                                         postgres_server,
                                                                                         tmp_path_factory, tmp_path):
    """Served Airflow components (a real triggerer): the second of two 2-host jobs on a quota that holds one waits
    deferred; the training-jobs API says "queued" in team-a with the trigger's latest line, then it runs."""
    import json

    from airflow_server import airflow_deployment
    from kube_cluster import make_namespace

    namespace = "kq-page"
    env = {"AIRFLOW__TRAINING_KUBERNETES__PROFILES": json.dumps({namespace: {"namespace": namespace}}),
           "AIRFLOW__TRAINING_KUBERNETES__QUEUES": "team-a,team-b"}
    with airflow_deployment(tmp_path_factory, postgres_server, extra_env=env, name="airflow-kueue-page") as server:
        make_namespace(kube_admin["core"], server.home / "workspace", name=namespace)
        try:
            make_queues(kube_cluster, kube_admin["api"], namespace, QUOTA)
            status, body = server.api.call("POST", "/api/v2/connections", {
                "connection_id": "kubernetes_default", "conn_type": "kubernetes",
                "extra": json.dumps({"kube_config_path": str(kube_cluster.kubeconfig)})})
            assert status in (201, 409), body
            code = tmp_path / "code"
            code.mkdir()
            (code / "train.py").write_text("print('kwok plays this container')\n")

            def conf(name: str, run: str) -> dict:
                return {"job_name": name, "backend": "kubernetes", "image_uri": "training-base:latest",
                        "source_dir": str(code), "entry_point": "train.py", "output_path": str(tmp_path / "out"),
                        "instance_count": 2, "resources": {"cpu": "1", "memory": "1Gi"},
                        "kubernetes": {"profile": namespace, "queue": "team-a", "annotations": {PLAY + "run": run}}}

            # The first holds the quota until the second has been seen waiting, then is stopped: on a loaded machine
            # the second's staging outlasted a first job of fixed length, and the second never had to wait.
            server.trigger("training_job", conf("kq-page-first", "600s"), run_id="kq-page-first")

            def first_admitted() -> bool:
                """Kueue let the first Job's pods start (a job page says "running" from its first stage on: CI
                triggered the second while the first was still staging, and the second's Job was created first)."""
                try:
                    return kube_admin["batch"].read_namespaced_job("kq-page-first", namespace).spec.suspend is False
                except ApiException as err:
                    if err.status == 404:  # not created yet
                        return False
                    raise

            wait_for("the first job admitted", first_admitted, 300, interval=1)
            server.trigger("training_job", conf("kq-page-second", "1s"), run_id="kq-page-second")
            last_seen = {}

            def placed() -> dict | None:
                job = server.api.call("GET", "/training-jobs/api/jobs/training_job/kq-page-second/-1")[1]
                last_seen.update(status=job.get("status"), queue_line=job.get("queue_line"))
                return job if re.search(r"queued in team-a \(position 1, waiting for cpu", job.get("queue_line") or "") else None

            try:
                queued = wait_for("the second job's page to show its place in team-a", placed, 300, interval=1)
            except AssertionError as err:
                raise AssertionError(f"{err}; its page said last {last_seen}") from None
            assert (queued["status"], queued["queue"]) == ("queued", "team-a"), queued
            launch = next(s for s in queued["stages"] if s["stage"] == "launch_training")
            assert launch["state"] == "deferred", queued["stages"]
            listed = server.api.call("GET", "/training-jobs/api/jobs?status=queued")[1]["items"]
            assert [(i["job_name"], i["queue"]) for i in listed] == [("kq-page-second", "team-a")], listed
            print(f"queued job's page: {queued['queue_line']}")
            status, body = server.api.call("POST", "/training-jobs/api/jobs/training_job/kq-page-first/-1/stop", {})
            assert status == 200, body
            assert server.wait_for_run("training_job", "kq-page-first", timeout=300)["state"] == "failed"  # stopped
            assert server.wait_for_run("training_job", "kq-page-second", timeout=300)["state"] == "success"
            done = server.api.call("GET", "/training-jobs/api/jobs/training_job/kq-page-second/-1")[1]  # ended: no longer said to wait anywhere
            assert done["status"] != "queued" and (done["queue"], done["queue_line"]) == (None, None), done
            print(f"ended as {done['status']}: {[(s['stage'], s['state']) for s in done['stages']]}")
        finally:
            kueue.delete_cluster_queue(kube_admin["api"], namespace)
            kube_admin["core"].delete_namespace(namespace)
            kube_admin["core"].delete_persistent_volume(namespace)


def test_a_data_plane_step_kueue_holds_says_so_and_its_start_timeout_names_the_queue(kueue_queues, kube_admin):
    """A step's Job (the cluster's data plane) in data_plane_queue, a LocalQueue Kueue does not admit it from (here:
    none of that name): Kueue's webhook suspends it, the task log says where it waits, the start timeout says why."""
    from types import SimpleNamespace

    from operators.launch.kubernetes.api import KubernetesLaunchError
    from operators.launch.kubernetes.data_plane import step_manifest
    from operators.launch.kubernetes.options import KubernetesJobOptions
    from operators.launch.kubernetes.steps import ClusterStep

    options = KubernetesJobOptions(namespace=kueue_queues, data_plane="cluster", data_plane_queue="team-steps",
                                   data_plane_image="training-airflow:latest", startup_timeout_seconds=15)
    kube = SimpleNamespace(batch_v1_client=kube_admin["batch"], core_v1_client=kube_admin["core"])
    lines: list[str] = []
    step = ClusterStep(kube, options, "kq-step", "stage_code", on_line=lines.append)
    step._submit(step_manifest(step.name, "kq-step", "stage_code", options, workspace="/workspace",
                               command=["true"], payload={}, settings_env={}))
    with pytest.raises(KubernetesLaunchError, match=r"did not start within 15 s .*\(waits suspended in Kueue queue "
                                                    r"team-steps until Kueue admits it\)"):
        step._wait_for_pod()
    assert [line for line in lines if "waits suspended" in line] == [
        f"[cluster] step stage_code: Job {kueue_queues}/kq-step-stage-code waits suspended in Kueue queue team-steps "
        "until Kueue admits it"]
    wait_for("the step's Job deleted", lambda: gone(kube_admin, kueue_queues, "kq-step-stage-code"), 120)

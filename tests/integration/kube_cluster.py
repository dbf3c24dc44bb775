"""Fixtures for the real-cluster tests: the local control plane of tools/k8s (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler from the pinned release; kwok plays the node and its kubelet).

- `kube_cluster` (session): the cluster of `make cluster` when TRAINING_CLUSTER_DIR names it (make test-cluster),
  else a private one started for the session on free loopback ports and stopped at the end (make test).
- `kube_namespace`: a fresh namespace that enforces the restricted Pod Security profile, with a hostPath
  PersistentVolume of this session's workspace and its claim `training-workspace`; Airflow's
  kubernetes_default connection and [training.kubernetes] namespace point at it.

- `make_queues`: Kueue (started by the cluster when built, tools/kueue) queues for a test namespace.

tests/integration/conftest.py makes them available to every integration test module.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "k8s"))
sys.path.insert(0, str(REPO / "tools" / "kueue"))
import kueue  # noqa: E402
from localcluster import DEFAULT_BIN_DIR, LocalCluster  # noqa: E402

# kwok plays the containers; these pod annotations choose what a container "does" (tools/k8s/kwok/pod-stages.yaml)
PLAY = "kwok.training.local/"


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory) -> LocalCluster:
    bin_dir = Path(os.environ.get("K8S_BIN") or DEFAULT_BIN_DIR)
    shared = os.environ.get("TRAINING_CLUSTER_DIR")
    if not (bin_dir / "k8s").exists() or not (bin_dir / "kwok").exists():
        pytest.skip(f"the control plane is not built in {bin_dir}: run `make k8s-tools` (make test does)")
    if shared:
        yield LocalCluster(Path(shared), bin_dir).up()  # idempotent: reuses the running cluster
        return
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), bin_dir,
                           workspace=Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"]))
    started = time.monotonic()
    cluster.up()
    print(f"local control plane up in {time.monotonic() - started:.1f}s")
    yield cluster
    cluster.down()


@pytest.fixture(scope="session")
def kube_admin(kube_cluster):
    """Admin clients (system:masters) for set-up and for looking at what the launcher did."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(kube_cluster.kubeconfig))
    yield {"core": client.CoreV1Api(api), "batch": client.BatchV1Api(api), "rbac": client.RbacAuthorizationV1Api(api),
           "discovery": client.DiscoveryV1Api(api), "scheduling": client.SchedulingV1Api(api), "api": api}
    api.close()


def make_namespace(core, workspace: Path, name: str | None = None) -> str:
    namespace = name or f"train-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    core.create_persistent_volume({
        "metadata": {"name": namespace},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "hostPath": {"path": str(workspace), "type": "DirectoryOrCreate"},
                 "claimRef": {"namespace": namespace, "name": "training-workspace"}}})
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "training-workspace"},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": namespace,
                 "resources": {"requests": {"storage": "10Gi"}}}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        claim = core.read_namespaced_persistent_volume_claim("training-workspace", namespace)
        if claim.status.phase == "Bound" and core.list_namespaced_service_account(namespace).items:
            return namespace
        time.sleep(0.2)
    raise AssertionError(f"namespace {namespace}: claim not bound or no default service account within 30s")


@pytest.fixture
def kube_namespace(kube_cluster, kube_admin, monkeypatch) -> str:
    core = kube_admin["core"]
    namespace = make_namespace(core, Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"]))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kube_cluster.kubeconfig)}}))
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__NAMESPACE", namespace)
    yield namespace
    core.delete_namespace(namespace)
    core.delete_persistent_volume(namespace)


def make_queues(cluster: LocalCluster, api, namespace: str, quota: dict[str, str]) -> None:
    """A ClusterQueue named after `namespace` with `quota`, its LocalQueues team-a and team-b, the priorities low and
    high (tools/kueue/kueue.py), once Kueue has taken the LocalQueues up; skips when Kueue is not built."""
    from kubernetes import client

    if cluster.kueue_dir is None:
        pytest.skip(f"Kueue is not built in {kueue.DEFAULT_KUEUE_DIR}: run `make kueue` (make test does)")
    kueue.ensure_queues(api, namespace, namespace, quota)
    objects = client.CustomObjectsApi(api)

    def active(name: str) -> bool:
        queue = objects.get_namespaced_custom_object(kueue.GROUP, kueue.VERSION, namespace, "localqueues", name)
        conditions = {c["type"]: c["status"] for c in (queue.get("status") or {}).get("conditions") or []}
        return conditions.get("Active") == "True"

    deadline = time.monotonic() + 60
    while not (active("team-a") and active("team-b")):
        if time.monotonic() > deadline:
            raise AssertionError(f"Kueue did not activate the LocalQueues of {namespace} within 60s")
        time.sleep(0.2)

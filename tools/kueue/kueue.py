"""Kueue (kubernetes-sigs/kueue, built by tools/kueue/build.sh) next to the local control plane of tools/k8s:
its CRDs, its controller's configuration and the queues a training namespace uses.

How it runs on loopback, and why:
- **Internal cert management** (Kueue issues its own serving certificate into a Secret in kueue-system; the
  cluster copies it into the webhook's certDir, as the kubelet would mount it): no cert-manager.
- **Its admission webhooks are not registered with the API server.** The API server reaches a webhook Service
  through its ClusterIP, and nothing routes ClusterIPs on loopback (no kube-proxy). What the webhooks would do for
  the launcher's Jobs, the launcher does itself: it creates them suspended with the queue label (the Job webhook's
  defaulting), and Kueue's Job reconciler creates, admits and unsuspends their Workloads as on any cluster.
- The CRDs as the release ships them (config/components/crd/bases) plus the conversion stanza its kustomization
  adds: the cert rotator refuses to start without it. Nothing here uses the old v1beta1 version, so no
  conversion request is ever sent.
- Only the batch/job integration; leader election, metrics and the visibility server off (one controller, and
  positions in a queue are read from the Workloads themselves, operators/launch/kubernetes/workload.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

KUEUE_VERSION = "v0.17.0"
DEFAULT_KUEUE_DIR = Path(os.environ.get("KUEUE_DIR") or Path(os.environ.get(
    "TOOLS_CACHE", Path.home() / ".cache/training-jobs")) / f"kueue-{KUEUE_VERSION}")
NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
# Pod resources a training Job requests (operators/launch/kubernetes/manifests.py): every ClusterQueue must cover them.
COVERED_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
# WorkloadPriorityClasses of the local cluster (admins define theirs; these are what the tests pick from).
PRIORITIES = {"low": 100, "high": 1000}


def built(kueue_dir: Path = DEFAULT_KUEUE_DIR) -> bool:
    return (kueue_dir / "kueue").exists() and (kueue_dir / "crds").is_dir()


def config(cert_dir: Path, webhook_port: int, health_port: int) -> dict[str, Any]:
    """The controller's Configuration (config.kueue.x-k8s.io/v1beta2) for one local cluster."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "manageJobsWithoutQueueName": False,  # only Jobs with a queue label are Kueue's
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                   "webhookSecretName": WEBHOOK_SECRET},
        "integrations": {"frameworks": ["batch/job"]},
    }


def arguments(config_file: Path, kubeconfig: Path) -> list[str]:
    return [f"--config={config_file}", f"--kubeconfig={kubeconfig}", "--feature-gates=VisibilityOnDemand=false",
            "--zap-log-level=info"]


def install_crds(api: Any, kueue_dir: Path = DEFAULT_KUEUE_DIR, timeout: float = 60) -> None:
    """Create (or update) the release's CRDs and wait until they are served."""
    import yaml
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((kueue_dir / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "path": "/convert"}}}}
        names.append(crd["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as err:
            if err.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            conditions = {c.type: c.status for c in ext.read_custom_resource_definition(name).status.conditions or []}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established within {timeout:.0f}s")
            time.sleep(0.2)


def _ensure(create, *args) -> None:
    from kubernetes.client.rest import ApiException

    try:
        create(*args)
    except ApiException as err:
        if err.status != 409:
            raise


def ensure_namespace(api: Any) -> None:
    """kueue-system, and the (empty) Secret the cert rotator fills, as Kueue's own manifests create them."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    _ensure(core.create_namespace, {"metadata": {"name": NAMESPACE}})
    _ensure(core.create_namespaced_secret, NAMESPACE, {"metadata": {"name": WEBHOOK_SECRET}})


def ensure_queues(api: Any, namespace: str, cluster_queue: str, quota: dict[str, str],
                  local_queues: tuple[str, ...] = ("team-a", "team-b"), flavor: str = "default-flavor") -> None:
    """A ResourceFlavor, a ClusterQueue with `quota` (nominal, no borrowing) that preempts lower priorities within
    itself, the LocalQueues of `namespace` pointing at it, and the WorkloadPriorityClasses."""
    from kubernetes import client

    objects = client.CustomObjectsApi(api)

    def cluster_scoped(plural: str, body: dict) -> None:
        _ensure(objects.create_cluster_custom_object, GROUP, VERSION, plural,
                {"apiVersion": f"{GROUP}/{VERSION}", **body})

    cluster_scoped("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": flavor}})
    for name, value in PRIORITIES.items():
        cluster_scoped("workloadpriorityclasses", {"kind": "WorkloadPriorityClass", "metadata": {"name": name},
                                                   "value": value, "description": f"training jobs: {name}"})
    resources = [{"name": r, "nominalQuota": quota.get(r, "0")} for r in COVERED_RESOURCES]
    cluster_scoped("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": cluster_queue}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES),
                            "flavors": [{"name": flavor, "resources": resources}]}]}})
    for queue in local_queues:
        _ensure(objects.create_namespaced_custom_object, GROUP, VERSION, namespace, "localqueues",
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                 "metadata": {"name": queue, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}})


def delete_cluster_queue(api: Any, name: str) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        client.CustomObjectsApi(api).delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
    except ApiException as err:
        if err.status != 404:
            raise


def mount_certs(api: Any, cert_dir: Path) -> bool:
    """Do what the kubelet does for Kueue's pod: put the Secret its cert rotator filled into the webhook's certDir,
    where the rotator waits for them (it never writes files itself). False while the Secret is still empty."""
    import base64

    from kubernetes import client

    data = client.CoreV1Api(api).read_namespaced_secret(WEBHOOK_SECRET, NAMESPACE).data or {}
    if "tls.crt" not in data or "tls.key" not in data:
        return False
    for name, value in data.items():
        path = cert_dir / name
        path.write_bytes(base64.b64decode(value))
        path.chmod(0o600)
    return True


def write_config(path: Path, cert_dir: Path, webhook_port: int, health_port: int) -> None:
    cert_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config(cert_dir, webhook_port, health_port), indent=1))

"""Fixtures for the real-node tests: the local control plane of tools/k8s plus a real node (tools/node/realnode.py:
containerd + runc, CNI bridge, the kubelet, CoreDNS), so pods really run the training image.

- `real_cluster` (module): the cluster of `make cluster NODE=real` when TRAINING_CLUSTER_DIR names one with a
  running real node, else a private control plane and node for the module, stopped at its end.
- `real_namespace`: a fresh restricted namespace with the workspace claim, Airflow pointed at it.
- `pod_s3_endpoint`: the session's MinIO (loopback only) as pods reach it: a TCP relay listening on the node's bridge
  gateway address (the pods' default route and the node's own address; nothing outside the machine reaches it).

Skips, with the reason, only when this machine cannot run a node (not root, no containerd/runc/CNI plugins, no
Docker engine to copy the images from) or when the binaries or the image are not built (make test builds them).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from timeout_guard import on_hard_exit

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "k8s"))
sys.path.insert(0, str(REPO / "tools" / "node"))
from kube_cluster import make_namespace  # noqa: E402
from localcluster import DEFAULT_BIN_DIR, LocalCluster  # noqa: E402
from realnode import RealNode, cannot_run_reason  # noqa: E402

IMAGE = os.environ.get("TRAINING_E2E_IMAGE", "training-base:latest")


def _missing(bin_dir: Path, node: RealNode) -> str | None:
    kubelet = subprocess.run([str(bin_dir / "k8s"), "kubelet", "--version"], capture_output=True, text=True)
    if kubelet.returncode != 0:
        return f"{bin_dir / 'k8s'} has no kubelet compiled in: run `make k8s-tools` (make test does)"
    if not node.coredns_bin.exists():
        return f"CoreDNS is not built at {node.coredns_bin}: run `make node-tools` (make test does)"
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        return f"the image {IMAGE} is not in the local Docker engine: run `make images` (make test does)"
    return None


@pytest.fixture(scope="session")  # one cluster for every real-node module
def real_cluster(tmp_path_factory):
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"this machine cannot run a real node: {reason}")
    bin_dir = Path(os.environ.get("K8S_BIN") or DEFAULT_BIN_DIR)
    shared = os.environ.get("TRAINING_CLUSTER_DIR")
    if shared and RealNode(Path(shared) / "node").running():
        cluster = LocalCluster(Path(shared), bin_dir).up()
        yield cluster, RealNode(Path(shared) / "node", cluster.kubeconfig, cluster.pki, k8s_bin=bin_dir)
        return
    directory = tmp_path_factory.mktemp("real-cluster")
    node = RealNode(directory / "node", k8s_bin=bin_dir)
    missing = _missing(bin_dir, node)
    if missing:
        pytest.skip(missing)
    cluster = LocalCluster(directory, bin_dir, workspace=Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"]))
    started = time.monotonic()
    cluster.up()
    node = RealNode(directory / "node", cluster.kubeconfig, cluster.pki, k8s_bin=bin_dir)
    # The pods' processes are not this process's children: a test process that must be ended stops the node first.
    forget = on_hard_exit(node.down)
    try:
        node.up([IMAGE])
        print(f"control plane and real node up in {time.monotonic() - started:.1f}s")
        yield cluster, node
    finally:
        forget()
        node.down()
        cluster.down()


@pytest.fixture(scope="session")
def real_admin(real_cluster):
    from kubernetes import client, config

    api = config.new_client_from_config(str(real_cluster[0].kubeconfig))
    yield {"core": client.CoreV1Api(api), "batch": client.BatchV1Api(api), "api": api}
    api.close()


@pytest.fixture
def real_namespace(real_cluster, real_admin, monkeypatch) -> str:
    cluster, _ = real_cluster
    core = real_admin["core"]
    namespace = make_namespace(core, Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"]))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(cluster.kubeconfig)}}))
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__NAMESPACE", namespace)
    yield namespace
    core.delete_namespace(namespace)
    core.delete_persistent_volume(namespace)


class TcpRelay:
    """Accepts on (host, free port) and pipes each connection to a loopback port, both ways."""

    def __init__(self, host: str, target_port: int):
        self.target_port = target_port
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="session")
def pod_s3_endpoint(real_cluster, s3_server) -> str:
    """http://<bridge gateway>:<port>: the session's MinIO as the pods reach it (see the module docstring)."""
    _, node = real_cluster
    relay = TcpRelay(node.state()["gateway"], s3_server.port)
    yield f"http://{node.state()['gateway']}:{relay.port}"
    relay.close()

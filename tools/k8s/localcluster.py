"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
(one binary built from pinned modules, see tools/k8s/go.mod) and kwok playing the node and its kubelet.

    python tools/k8s/localcluster.py up   [--dir .cluster] [--bin-dir DIR] [--workspace DIR] [--namespace training]
                                          [--kueue-dir DIR | --no-kueue]
    python tools/k8s/localcluster.py down [--dir .cluster]

`up` is idempotent: a running cluster in --dir is reused (its namespace, volume and node re-ensured).
Everything listens on 127.0.0.1 on free ports, with TLS and client certificates; authorization is RBAC;
admission is the apiserver's default set (Pod Security, Priority, ServiceAccount, ResourceQuota, ...).
Pods get fake IPs from kwok: nothing ever connects to them.
When Kueue is built (tools/kueue/build.sh), its controller runs too (tools/kueue/kueue.py says how), with a
ClusterQueue `training` and the LocalQueues team-a and team-b in the namespace.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kueue"))
import kueue  # noqa: E402
from pki import write_pki  # noqa: E402

K8S_VERSION = "v1.34.4"
KWOK_VERSION = "v0.7.0"
HERE = Path(__file__).resolve().parent
DEFAULT_BIN_DIR = Path(os.environ.get("TOOLS_CACHE", Path.home() / ".cache/training-jobs")) / f"k8s-{K8S_VERSION}"
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
NODE = "kwok-node-0"
# The controllers a training Job needs, and nothing that expects real nodes (node-lifecycle would taint the
# kwok node whenever a lease is late).
CONTROLLERS = ["serviceaccount-controller", "serviceaccount-token-controller", "garbage-collector-controller",
               "job-controller", "ttl-after-finished-controller", "endpointslice-controller",
               "endpoints-controller", "namespace-controller", "persistentvolume-binder-controller",
               "persistentvolume-protection-controller", "persistentvolumeclaim-protection-controller",
               "pod-garbage-collector-controller", "resourcequota-controller", "disruption-controller",
               "root-ca-certificate-publisher-controller", "clusterrole-aggregation-controller"]
# The local cluster's own queue (make cluster): what kwok's node can hold, so quota is what decides admission.
DEFAULT_QUOTA = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}
LOG_LINES = 500  # lines of the CRI log file every pod "prints" (see write_pod_log)


def log(message: str) -> None:
    print(f"[cluster] {message}", flush=True)


class ClusterError(RuntimeError):
    """The control plane could not start: the message names the part, what it waited for and where its log is.

    An Exception, not SystemExit: a test fixture that starts the cluster records it as the reason of every test that
    needs the cluster (pytest does not cache a fixture that raised SystemExit and reported an internal assertion for
    every later test instead). `main` turns it into the command's one-line error."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    def __init__(self, directory: Path, bin_dir: Path = DEFAULT_BIN_DIR, workspace: Path | None = None,
                 namespace: str = "training", kueue_dir: Path | None = kueue.DEFAULT_KUEUE_DIR):
        self.dir = directory.resolve()
        # Kueue runs when it is built (make cluster builds it); None: never.
        self.kueue_dir = kueue_dir if kueue_dir is not None and kueue.built(kueue_dir) else None
        self.components = COMPONENTS + (["kueue"] if self.kueue_dir else [])
        self.bin_dir = bin_dir
        self.workspace = (workspace or self.dir / "workspace").resolve()
        self.namespace = namespace
        self.pki = self.dir / "pki"
        self.state_file = self.dir / "state.json"

    # -- paths and state
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters): what `make cluster` hands to Airflow and tests."""
        return self.dir / "kubeconfig"

    @property
    def pod_log(self) -> Path:
        return self.dir / "pod-logs" / "train.log"

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def binary(self, name: str) -> str:
        path = self.bin_dir / name
        if not path.exists():
            raise ClusterError(f"{path} is missing: build the control plane first (make k8s-tools)")
        return str(path)

    # -- lifecycle
    def running(self) -> bool:
        state = self.state()
        if not state or not all(_alive(state.get("pids", {}).get(c)) for c in self.components):
            return False
        try:
            return self._get("/readyz", state) == b"ok"
        except OSError:
            return False

    def up(self) -> "LocalCluster":
        started = time.monotonic()
        # Each part's port is chosen free, then bound seconds later (Kueue's only after the CRDs are served): on a
        # busy machine another process can take it in between. That part exits at once; one more start, on other
        # ports, is what a person would do.
        for attempt in (1, 2):
            try:
                if self.running():
                    log(f"already running ({self.kubeconfig})")
                else:
                    self.down(quiet=True)
                    self._start()
                self._ensure_objects()
                break
            except ClusterError as error:
                if attempt == 2 or "address already in use" not in str(error):
                    raise
                log(f"{error}\nstarting again on other ports")
                self.down(quiet=True)
        log(f"ready in {time.monotonic() - started:.1f}s: KUBECONFIG={self.kubeconfig} namespace={self.namespace}")
        return self

    def down(self, quiet: bool = False) -> None:
        state = self.state()
        for name in reversed(list(state.get("pids", {}))):
            pid = state.get("pids", {}).get(name)
            if _alive(pid) and _is_ours(pid, self.dir):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for name in state.get("pids", {}):
            pid = state.get("pids", {}).get(name)
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid) and _is_ours(pid, self.dir):
                os.killpg(pid, signal.SIGKILL)
                gone = time.monotonic() + 10  # a Go process takes a moment to end even so
                while _alive(pid) and time.monotonic() < gone:
                    time.sleep(0.05)
        if state and not quiet:
            log(f"stopped ({self.dir})")
        self.state_file.unlink(missing_ok=True)

    def _start(self) -> None:
        for sub in ("logs", "etcd", "pod-logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)
        write_pki(self.pki)
        ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "kwok", "kueue-webhook",
                                                 "kueue-health")}
        state = {"ports": ports, "pids": {}, "version": K8S_VERSION}
        self._write_configs(ports)
        p = self.pki
        etcd = f"https://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        self._spawn(state, "etcd", [
            "--name=local", f"--data-dir={self.dir / 'etcd'}", f"--listen-client-urls={etcd}",
            f"--advertise-client-urls={etcd}", f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}", f"--cert-file={p / 'etcd.crt'}", f"--key-file={p / 'etcd.key'}",
            f"--trusted-ca-file={p / 'ca.crt'}", "--client-cert-auth", "--unsafe-no-fsync", "--log-level=warn",
            "--snapshot-count=10000"])
        self._spawn(state, "kube-apiserver", [
            f"--etcd-servers={etcd}", f"--etcd-cafile={p / 'ca.crt'}", f"--etcd-certfile={p / 'apiserver-etcd-client.crt'}",
            f"--etcd-keyfile={p / 'apiserver-etcd-client.key'}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}", "--anonymous-auth=false", "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={p / 'ca.crt'}",
            f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
            "--allow-privileged=false", "--profiling=false", "--v=1"])
        self.state_file.write_text(json.dumps(state))
        self._wait("the API server", lambda: self._get("/readyz", state) == b"ok", 120)
        kubeconfigs = self.dir / "kubeconfigs"
        self._spawn(state, "kube-controller-manager", [
            f"--kubeconfig={kubeconfigs / 'controller-manager'}", "--bind-address=127.0.0.1", "--secure-port=0",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--controllers={','.join(CONTROLLERS)}", f"--service-account-private-key-file={p / 'sa.key'}",
            f"--root-ca-file={p / 'ca.crt'}", "--concurrent-job-syncs=10", "--v=1"])
        self._spawn(state, "kube-scheduler", [
            f"--kubeconfig={kubeconfigs / 'scheduler'}", "--bind-address=127.0.0.1", "--secure-port=0",
            "--leader-elect=false", "--v=1"])
        self._spawn(state, "kwok", [
            f"--kubeconfig={kubeconfigs / 'kwok'}", f"--config={self.dir / 'kwok.yaml'}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-ip=127.0.0.1",
            f"--node-port={ports['kwok']}", f"--server-address=127.0.0.1:{ports['kwok']}",
            f"--tls-cert-file={p / 'kwok-serving.crt'}", f"--tls-private-key-file={p / 'kwok-serving.key'}",
            "--cidr=10.244.0.1/16"])
        self.state_file.write_text(json.dumps(state))
        if self.kueue_dir:
            self._start_kueue(state)

    def _start_kueue(self, state: dict) -> None:
        from kubernetes import config

        api = config.new_client_from_config(str(self.kubeconfig))
        try:
            kueue.install_crds(api, self.kueue_dir)
            kueue.ensure_namespace(api)
        finally:
            api.close()
        config_file = self.dir / "kueue.json"
        kueue.write_config(config_file, self.dir / "kueue-certs", state["ports"]["kueue-webhook"],
                           state["ports"]["kueue-health"])
        self._spawn(state, "kueue", kueue.arguments(config_file, self.dir / "kubeconfigs" / "kueue"))
        self.state_file.write_text(json.dumps(state))

    def _spawn(self, state: dict, name: str, args: list[str]) -> None:
        binary = str(self.kueue_dir / "kueue") if name == "kueue" else self.binary(name)
        out = open(self.dir / "logs" / f"{name}.log", "ab")
        proc = subprocess.Popen([binary, *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.dir,
                                env={**os.environ, "HOME": str(self.dir)})  # kwok reads ~/.kwok otherwise
        state["pids"][name] = proc.pid

    def _write_configs(self, ports: dict) -> None:
        server = f"https://127.0.0.1:{ports['apiserver']}"
        kubeconfigs = self.dir / "kubeconfigs"
        kubeconfigs.mkdir(exist_ok=True)
        # Kueue manages CRDs, webhooks and every namespace's Jobs: it runs as the admin (as its ClusterRole would).
        for name, cert in (("controller-manager", "controller-manager"), ("scheduler", "scheduler"),
                           ("kwok", "kwok"), ("kueue", "admin")):
            (kubeconfigs / name).write_text(json.dumps(self.kubeconfig_dict(server, cert)))
        self.kubeconfig.write_text(json.dumps(self.kubeconfig_dict(server, "admin", embed=True), indent=1))
        self.kubeconfig.chmod(0o600)
        write_pod_log(self.pod_log)
        stages = (HERE / "kwok" / "pod-stages.yaml").read_text()
        cluster_logs = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs",
                        "metadata": {"name": "training"}, "spec": {"logs": [{"logsFile": str(self.pod_log)}]}}
        (self.dir / "kwok.yaml").write_text(stages + "\n---\n" + json.dumps(cluster_logs) + "\n")

    def kubeconfig_dict(self, server: str, cert: str, embed: bool = False, user: str | None = None) -> dict:
        import base64

        def ref(key: str, path: Path) -> dict:
            if embed:
                return {f"{key}-data": base64.b64encode(path.read_bytes()).decode()}
            return {key: str(path)}

        user = user or cert
        credentials = {**ref("client-certificate", self.pki / f"{cert}.crt"),
                       **ref("client-key", self.pki / f"{cert}.key")}
        return {"apiVersion": "v1", "kind": "Config", "current-context": "local",
                "clusters": [{"name": "local", "cluster": {"server": server,
                                                           **ref("certificate-authority", self.pki / "ca.crt")}}],
                "users": [{"name": user, "user": credentials}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": user,
                                                           "namespace": self.namespace}}]}

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for a user known only by its client certificate (RBAC decides what it may do)."""
        from pki import issue_client_certificate

        name = f"user-{user}"
        issue_client_certificate(self.pki, name, user, ",".join(groups) or None)
        path = self.dir / "kubeconfigs" / name
        path.write_text(json.dumps(self.kubeconfig_dict(self.server(), name, embed=True, user=user)))
        path.chmod(0o600)
        return path

    def server(self) -> str:
        return f"https://127.0.0.1:{self.state()['ports']['apiserver']}"

    # -- objects every training job expects
    def _ensure_objects(self) -> None:
        from kubernetes import client, config
        from kubernetes.client.rest import ApiException

        api = config.new_client_from_config(str(self.kubeconfig))
        core = client.CoreV1Api(api)

        def ensure(create, body):
            try:
                create(body=body)
            except ApiException as err:
                if err.status != 409:
                    raise

        ensure(core.create_node, {
            "metadata": {"name": NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "type": "kwok"}},
            "status": {"capacity": _capacity(), "allocatable": _capacity()}})
        ensure(core.create_namespace, {"metadata": {"name": self.namespace, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/warn": "restricted"}}})
        pv = f"{self.namespace}-workspace"
        ensure(core.create_persistent_volume, {
            "metadata": {"name": pv, "labels": {"training.local/workspace": self.namespace}},
            "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteMany"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "hostPath": {"path": str(self.workspace), "type": "DirectoryOrCreate"},
                     "claimRef": {"namespace": self.namespace, "name": "training-workspace"}}})
        ensure(lambda body: core.create_namespaced_persistent_volume_claim(self.namespace, body), {
            "metadata": {"name": "training-workspace"},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
                     "resources": {"requests": {"storage": "100Gi"}}}})

        def ready() -> bool:
            node = core.read_node(NODE)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            claim = core.read_namespaced_persistent_volume_claim("training-workspace", self.namespace)
            accounts = core.list_namespaced_service_account(self.namespace).items
            return conditions.get("Ready") == "True" and claim.status.phase == "Bound" and bool(accounts)

        self._wait("the node, the workspace claim and the default service account", ready, 120)
        # The TaintNodesByCondition admission gave the new node the not-ready taint; the node-lifecycle controller
        # that would lift it is not run (it would taint the node again whenever kwok renews a lease late).
        core.patch_node(NODE, {"spec": {"taints": None}})
        if self.kueue_dir:
            self._wait("Kueue's serving certificate", lambda: kueue.mount_certs(api, self.dir / "kueue-certs"), 120)
            self._wait("Kueue", self.kueue_ready, 180)
            kueue.ensure_queues(api, self.namespace, self.namespace, DEFAULT_QUOTA)
        api.close()

    def kueue_ready(self) -> bool:
        port = self.state()["ports"]["kueue-health"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return resp.status == 200

    # -- helpers
    def _get(self, path: str, state: dict) -> bytes:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        url = f"https://127.0.0.1:{state['ports']['apiserver']}{path}"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            return resp.read()

    def _wait(self, what: str, check, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self._check_processes()
            try:
                if check():
                    return
            except Exception as err:  # not up yet: connection refused, 503, missing objects
                last = err
            time.sleep(0.2)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what} ({last!r}); logs in {self.dir / 'logs'}")

    def _check_processes(self) -> None:
        for name, pid in self.state().get("pids", {}).items():
            if not _alive(pid):
                tail = (self.dir / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
                raise ClusterError(f"{name} exited during start-up; end of {self.dir / 'logs' / name}.log:\n{tail}")


def _capacity() -> dict:
    return {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "1Ti"}


def write_pod_log(path: Path) -> None:
    """The CRI-format log every kwok pod serves: numbered lines, metrics, a multi-byte line and a long one, so a
    test can tell a lost or repeated line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(1, LOG_LINES + 1):
        text = f"line {i:04d}/{LOG_LINES} epoch={i // 100} loss={1 / i:.6f}"
        if i == 250:
            text += " naïve ✓ " + "x" * 4000
        # one line a millisecond, strictly increasing: log cursors compare timestamps
        lines.append(f"2026-01-01T00:00:{i // 1000:02d}.{(i % 1000) * 1_000_000:09d}Z stdout F {text}\n")
    path.write_text("".join(lines))


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie of ours is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def _is_ours(pid: int, directory: Path) -> bool:
    """Only processes started for this cluster directory are ever signalled (pids are reused)."""
    try:
        return Path(f"/proc/{pid}/cwd").resolve() == directory
    except OSError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, default=Path(".cluster"))
    parser.add_argument("--bin-dir", type=Path, default=DEFAULT_BIN_DIR)
    parser.add_argument("--workspace", type=Path)
    parser.add_argument("--namespace", default="training")
    parser.add_argument("--kueue-dir", type=Path, default=kueue.DEFAULT_KUEUE_DIR)
    parser.add_argument("--no-kueue", action="store_true", help="do not run Kueue even when it is built")
    args = parser.parse_args(argv)
    cluster = LocalCluster(args.dir, args.bin_dir, args.workspace, args.namespace,
                           None if args.no_kueue else args.kueue_dir)
    if args.command == "up":
        try:
            cluster.up()
        except (ClusterError, TimeoutError) as error:
            raise SystemExit(f"[cluster] {error}") from None
    elif args.command == "down":
        cluster.down()
    else:
        print("running" if cluster.running() else "stopped")
        return 0 if cluster.running() else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A real Kubernetes node on this machine: containerd + runc (Debian's), the CNI bridge/host-local plugins
(Debian's containernetworking-plugins), the kubelet (tools/k8s, built with `-tags nodes`) and CoreDNS
(tools/coredns) for the cluster.local names of Services and pods.

    python tools/node/realnode.py up   --dir DIR --kubeconfig ADMIN_KUBECONFIG --pki PKI_DIR [--k8s-bin DIR] [--image IMG ...]
    python tools/node/realnode.py down --dir DIR
    python tools/node/realnode.py check            # can this machine run a node? (exit 0, or 1 with the reason)

Everything belongs to DIR: containerd's root and socket, the kubelet's root, pod logs, a bridge `trnN` with
the pod subnet 10.213.N.0/24 (N chosen free on this machine), a cgroup `/training-node-N` under every v1
controller. So two clusters on one machine get two nodes that never see each other's pods. Nothing routes
outside the machine; pods reach each other over the bridge and CoreDNS on the bridge's gateway address.

No registry: the pause image is a static binary built here (tools/node/pause), and the images given with
--image are copied from the local Docker engine (`docker save | ctr images import`), skipped when present.

This machine has cgroup v1 (the kubelet 1.34 refuses it unless failCgroupV1 is false) and the cgroupfs driver
(no systemd as PID 1). kube-proxy is not started: training pods need DNS (headless Services) and pod IPs only,
and a second kube-proxy on the same machine would rewrite the first one's iptables chains.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from certs import issue_client_certificate, issue_serving_certificate  # noqa: E402
from images import PAUSE_IMAGE, image_store, import_images  # noqa: E402
from slots import choosing, free_index, remove_cgroups  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TOOLS_CACHE = Path(os.environ.get("TOOLS_CACHE", Path.home() / ".cache/training-jobs"))
K8S_VERSION = "v1.34.4"
COREDNS_VERSION = "v1.15.0"
CNI_BIN = Path("/usr/lib/cni")
CGROUP = Path("/sys/fs/cgroup")


def log(message: str) -> None:
    print(f"[node] {message}", flush=True)


class NodeError(RuntimeError):
    """The node could not start; the message says which part and where its log is. Not SystemExit, for the reason
    tools/k8s/localcluster.py's ClusterError gives (slots.py and images.py raise RuntimeError for theirs)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*cmd: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, capture_output=True, **kwargs)


def cannot_run_reason() -> str | None:
    """Why this machine cannot run a node (None when it can): what the node needs and is missing."""
    if os.geteuid() != 0:
        return "the node needs root (containerd, runc, network namespaces, cgroups); this process is not root"
    for tool in ("containerd", "ctr", "runc", "ip", "iptables"):
        if not shutil.which(tool):
            return f"`{tool}` is not installed (make node-deps installs Debian's containerd, runc, iproute2, iptables)"
    if not (CNI_BIN / "bridge").exists():
        return f"no CNI plugins in {CNI_BIN} (make node-deps installs Debian's containernetworking-plugins)"
    if not (CGROUP / "memory").is_dir() and not (CGROUP / "cgroup.controllers").exists():
        return f"no cgroup hierarchy under {CGROUP}"
    if not shutil.which("docker") or run("docker", "info", check=False).returncode != 0:
        return "no Docker engine to copy the locally built images from (make engine starts one)"
    return None


class RealNode:
    def __init__(self, directory: Path, kubeconfig: Path | None = None, pki: Path | None = None,
                 k8s_bin: Path | None = None, coredns_bin: Path | None = None):
        """kubeconfig: the cluster's admin one (CoreDNS reads Services with it, and `up` waits for the node with
        it); pki: the directory holding the cluster's ca.crt and ca.key, which sign the kubelet's certificates."""
        self.dir = directory.resolve()
        self.kubeconfig = kubeconfig
        self.ca_cert = pki / "ca.crt" if pki else None
        self.ca_key = pki / "ca.key" if pki else None
        self.k8s_bin = k8s_bin or Path(os.environ.get("K8S_BIN") or TOOLS_CACHE / f"k8s-{K8S_VERSION}")
        self.coredns_bin = coredns_bin or TOOLS_CACHE / f"coredns-{COREDNS_VERSION}" / "coredns"
        self.state_file = self.dir / "state.json"
        self.socket = self.dir / "containerd.sock"

    # -- state
    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def save(self, state: dict) -> None:
        self.state_file.write_text(json.dumps(state, indent=1))

    @property
    def name(self) -> str:
        return f"training-node-{self.state()['index']}"

    def ctr(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return run("ctr", "-a", str(self.socket), "-n", "k8s.io", *args, check=check, **kwargs)

    def running(self) -> bool:
        pids = self.state().get("pids", {})
        return bool(pids) and all(_alive(pid) for pid in pids.values())

    # -- up
    def up(self, images: list[str]) -> "RealNode":
        reason = cannot_run_reason()
        if reason:
            raise NodeError(f"cannot run a real node here: {reason}")
        if self.running():
            log(f"already running: node {self.name}")
            self.import_images(images)
            return self
        self.down(quiet=True)
        started = time.monotonic()
        for sub in ("logs", "cni", "kubelet", "pod-logs", "pki"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        with choosing():  # until this node's containerd holds its store: no other node takes the index
            state = {"index": free_index(log), "pids": {}}
            self.save(state)
            index = state["index"]
            state.update(bridge=f"trn{index}", subnet=f"10.213.{index}.0/24", gateway=f"10.213.{index}.1",
                         cgroup=f"training-node-{index}")
            self.save(state)
            self._network(state)
            self._cgroups(state)
            self._write_containerd_config(state)
            self._spawn(state, "containerd", ["containerd", "--config", str(self.dir / "containerd.toml")])
            self._wait("containerd", lambda: self.ctr("version", check=False).returncode == 0, 30)
        self._remove_containers()  # left in the kept store by an earlier node of this index that crashed
        self.import_images([PAUSE_IMAGE, *images])
        if self.kubeconfig:
            self._start_kubelet(state)
            self._start_coredns(state)
            self._wait(f"node {self.name} Ready", self._node_ready, 120)
            self._take_pods()
        log(f"ready in {time.monotonic() - started:.1f}s: node {self.name}, pods on {state['subnet']}, "
            f"DNS {state['gateway']}")
        return self

    def _network(self, state: dict) -> None:
        """The bridge exists before any pod so CoreDNS can listen on its gateway address from the start."""
        bridge = state["bridge"]
        run("ip", "link", "add", bridge, "type", "bridge")
        run("ip", "addr", "add", f"{state['gateway']}/24", "dev", bridge)
        run("ip", "link", "set", bridge, "up")
        # Docker sets FORWARD's policy to DROP and br_netfilter sends bridged frames through it: let pods
        # of this node talk to each other (DDP, the headless Service's hosts).
        run("iptables", "-I", "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT")
        cni = {"cniVersion": "0.4.0", "name": f"training-{state['index']}", "plugins": [{
            "type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
            "ipam": {"type": "host-local", "dataDir": str(self.dir / "cni-ipam"),
                     "ranges": [[{"subnet": state["subnet"], "gateway": state["gateway"]}]]}}]}
        (self.dir / "cni" / "10-training.conflist").write_text(json.dumps(cni, indent=1))

    def _cgroups(self, state: dict) -> None:
        """The kubelet's cgroupRoot must exist in every v1 hierarchy (cpuset needs its cpus/mems filled)."""
        for controller in CGROUP.iterdir():
            if not controller.is_dir() or controller.is_symlink():
                continue
            path = controller / state["cgroup"]
            path.mkdir(exist_ok=True)
            if controller.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (path / knob).write_text((controller / knob).read_text())

    def _write_containerd_config(self, state: dict) -> None:
        d = self.dir / "containerd"
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (self.dir / "containerd.toml").write_text(f"""version = 2
root = "{image_store(state['index'])}"
state = "{d / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'opt'}"
[{cri}]
  # Without CAP_SYS_RESOURCE (as here) runc cannot lower oom_score_adj below containerd's own value, which
  # the kubelet asks for the pod sandbox (-998): keep every container's at least containerd's.
  restrict_oom_score_adj = true
  sandbox_image = "{PAUSE_IMAGE}"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{self.dir / 'cni'}"
""")

    def import_images(self, images: list[str]) -> None:
        import_images(self.ctr, self.socket, images)

    def _start_kubelet(self, state: dict) -> None:
        pki = self.dir / "pki"
        issue_serving_certificate(self.ca_cert, self.ca_key, pki / "kubelet.crt", pki / "kubelet.key", self.name,
                                  state["gateway"])
        issue_client_certificate(self.ca_cert, self.ca_key, pki / "client.crt", pki / "client.key", self.name)
        admin = json.loads(self.kubeconfig.read_text())
        (self.dir / "kubelet.kubeconfig").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "node", "clusters": admin["clusters"][:1],
            "users": [{"name": "node", "user": {"client-certificate": str(pki / "client.crt"),
                                                "client-key": str(pki / "client.key")}}],
            "contexts": [{"name": "node", "context": {"cluster": admin["clusters"][0]["name"], "user": "node"}}]}))
        state["ports"] = {"kubelet": free_port(), "kubelet-healthz": free_port(), "dns-health": free_port(),
                          "dns-ready": free_port()}
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # cgroup v1 on this machine, no systemd: kubelet 1.34 fails on v1 unless told otherwise.
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{state['cgroup']}",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            # The node's address is its bridge's gateway: the kubelet refuses a loopback node IP, and the API
            # server reaches the kubelet there (logs) as pods reach CoreDNS.
            "address": state["gateway"], "port": state["ports"]["kubelet"], "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": state["ports"]["kubelet-healthz"],
            "tlsCertFile": str(pki / "kubelet.crt"), "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.ca_cert)}},
            "authorization": {"mode": "AlwaysAllow"},  # only the API server's client certificate gets in
            "clusterDomain": "cluster.local", "clusterDNS": [state["gateway"]],
            "podCIDR": state["subnet"], "podLogsDir": str(self.dir / "pod-logs"),
            "failSwapOn": False, "makeIPTablesUtilChains": False, "serializeImagePulls": False,
            # A shared disk whose use others change: never evict training pods or delete our imported images. With
            # "1%", a disk filled for a moment had the eviction manager delete the pause image (no registry to pull
            # it back from): every later pod stayed in ContainerCreating. "0%" switches a threshold off.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "0%", "imagefs.available": "0%",
                             "nodefs.inodesFree": "0%", "imagefs.inodesFree": "0%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "nodeStatusReportFrequency": "10s", "shutdownGracePeriod": "0s",
        }
        (self.dir / "kubelet.yaml").write_text(json.dumps(config, indent=1))
        self._spawn(state, "kubelet", [
            str(self.k8s_bin / "kubelet"), f"--config={self.dir / 'kubelet.yaml'}", f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
            f"--root-dir={self.dir / 'kubelet'}", f"--cert-dir={pki}", f"--hostname-override={self.name}",
            f"--node-ip={state['gateway']}", "--node-labels=training.local/node=real", "--v=1"])

    def _start_coredns(self, state: dict) -> None:
        ports = state["ports"]
        (self.dir / "Corefile").write_text(f""".:53 {{
    bind {state['gateway']}
    errors
    health 127.0.0.1:{ports['dns-health']}
    ready 127.0.0.1:{ports['dns-ready']}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig} local
        pods insecure
        ttl 5
    }}
    cache 5
}}
""")
        self._spawn(state, "coredns", [str(self.coredns_bin), "-conf", str(self.dir / "Corefile")])
        self._wait("CoreDNS", lambda: _http_ok(f"http://127.0.0.1:{ports['dns-ready']}/ready"), 60)

    def _node_ready(self) -> bool:
        from kubernetes import client, config

        api = config.new_client_from_config(str(self.kubeconfig))
        try:
            node = client.CoreV1Api(api).read_node(self.name)
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        finally:
            api.close()

    def _take_pods(self) -> None:
        """Make this node the one pods land on: lift the kubelet's registration taint (node.kubernetes.io/not-ready;
        the local control plane runs no node-lifecycle controller, which would lift it elsewhere) and cordon the
        other nodes (kwok's, which only plays containers)."""
        from kubernetes import client, config

        api = config.new_client_from_config(str(self.kubeconfig))
        try:
            core = client.CoreV1Api(api)
            node = core.read_node(self.name)
            taints = [t for t in node.spec.taints or [] if t.key != "node.kubernetes.io/not-ready"]
            core.patch_node(self.name, {"spec": {"taints": [api.sanitize_for_serialization(t) for t in taints]}})
            for other in core.list_node().items:
                if other.metadata.name != self.name and not other.spec.unschedulable:
                    core.patch_node(other.metadata.name, {"spec": {"unschedulable": True}})
                    log(f"cordoned node {other.metadata.name}: pods go to {self.name}")
        finally:
            api.close()

    # -- down
    def down(self, quiet: bool = False) -> None:
        state = self.state()
        for name in ("coredns", "kubelet"):
            _stop(state.get("pids", {}).get(name))
        if state.get("pids", {}).get("containerd") and _alive(state["pids"]["containerd"]):
            self._remove_containers()  # pod processes outlive containerd (their shims are separate)
        _stop(state.get("pids", {}).get("containerd"))
        for mount in reversed(run("findmnt", "-rn", "-o", "TARGET", check=False).stdout.splitlines()):
            if mount.startswith(str(self.dir) + "/"):
                run("umount", "-l", mount, check=False)
        if state.get("bridge"):
            run("iptables", "-D", "FORWARD", "-i", state["bridge"], "-o", state["bridge"], "-j", "ACCEPT", check=False)
            run("ip", "link", "del", state["bridge"], check=False)
        if state.get("cgroup"):
            remove_cgroups(state["cgroup"])
        shutil.rmtree(self.dir / "cni-ipam", ignore_errors=True)
        if state:
            self.save({k: v for k, v in state.items() if k not in ("pids", "bridge", "cgroup")})
        if not quiet:
            log("stopped")

    # -- helpers
    def _remove_containers(self) -> None:
        tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
        for task in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        if tasks:
            time.sleep(0.5)
        for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
            self.ctr("tasks", "delete", "-f", task, check=False)
        for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", container, check=False)

    def _spawn(self, state: dict, name: str, argv: list[str]) -> None:
        with open(self.dir / "logs" / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.dir)
        state["pids"][name] = proc.pid
        self.save(state)

    def _wait(self, what: str, check, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for name, pid in self.state().get("pids", {}).items():
                if not _alive(pid):
                    tail = (self.dir / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise NodeError(f"{name} exited while waiting for {what}; end of its log:\n{tail}")
            try:
                if check():
                    return
            except Exception as err:  # not up yet
                last = err
            time.sleep(0.5)
        raise NodeError(f"timed out after {timeout:.0f}s waiting for {what} ({last!r}); logs in {self.dir / 'logs'}")


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _stop(pid: int | None, timeout: float = 10) -> None:
    if not _alive(pid):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "down", "check"])
    parser.add_argument("--dir", type=Path, default=REPO / ".cluster" / "node")
    parser.add_argument("--kubeconfig", type=Path)
    parser.add_argument("--pki", type=Path, help="directory with the cluster's ca.crt and ca.key")
    parser.add_argument("--image", action="append", default=[])
    parser.add_argument("--k8s-bin", type=Path, help="directory of the k8s binary built with -tags nodes")
    args = parser.parse_args()
    if args.action == "check":
        reason = cannot_run_reason()
        print(reason or "a real node can run here")
        raise SystemExit(1 if reason else 0)
    node = RealNode(args.dir, args.kubeconfig, args.pki, k8s_bin=args.k8s_bin)
    if args.action == "up":
        try:
            node.up(args.image)
        except RuntimeError as error:
            raise SystemExit(f"[node] {error}") from None
    else:
        node.down()


if __name__ == "__main__":
    main()

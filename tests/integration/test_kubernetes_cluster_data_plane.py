"""The cluster's data plane ([training.kubernetes] data_plane = cluster) on the real node: Airflow's worker mounts no
volume and holds no storage connection; the platform's image stages the code, fills the cache, writes the configs and
uploads the model in pods beside the training, with the connections of the namespace's storage Secret. The node's
workspace volume is a directory the worker's [training] workspace is not.

Each job is one `airflow dags test` run, as a user types it; figures are printed (pytest -s)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from operators.lineage.record import read_record

from counting_proxy import aws_connection_json
from kube_cluster import make_namespace
from real_node import TcpRelay
from test_kubernetes_local_cluster_dag import dags_test, failure_reasons, latest_run

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.usefixtures("airflow_db")]

PLATFORM_IMAGE = os.environ.get("TRAINING_AIRFLOW_IMAGE", "training-airflow:latest")
TRAINING_IMAGE = os.environ.get("TRAINING_E2E_IMAGE", "training-base:latest")
STORAGE_SECRET = "training-storage"

TRAIN = """\
import os, socket
data = os.environ["SM_CHANNEL_TRAIN"]
for name in sorted(os.listdir(data)):
    print(f"{socket.gethostname()} reads {name}: {open(os.path.join(data, name)).read()}", flush=True)
model = os.environ["SM_MODEL_DIR"]
if os.environ.get("SM_CURRENT_HOST") == "algo-1" or socket.gethostname().endswith("-0"):
    with open(os.path.join(model, "weights.bin"), "wb") as f:
        f.write(bytes(range(256)) * 4096)  # 1 MiB the test finds again in model.tar.gz
    os.symlink("/etc/passwd", os.path.join(model, "passwd"))  # a hostile link: never packed
    with open(os.environ["TRAINING_METRICS_FILE"], "a") as f:  # a point the script writes, not logs
        f.write('{"name": "accuracy", "value": 0.75, "step": 7}\\n')
print("loss=0.25", flush=True)
"""


@pytest.fixture(scope="module")
def platform_image(real_cluster) -> str:
    if subprocess.run(["docker", "image", "inspect", PLATFORM_IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"the image {PLATFORM_IMAGE} is not in the local Docker engine: run `make images` (make test does)")
    started = time.monotonic()
    real_cluster[1].import_images([PLATFORM_IMAGE])
    print(f"\n{PLATFORM_IMAGE} in the node's containerd after {time.monotonic() - started:.1f}s")
    return PLATFORM_IMAGE


@contextlib.contextmanager
def storage_namespace(core, node, s3_server, s3_proxy, volume: Path):
    """A namespace whose workspace volume is `volume` (a directory of its own) and the storage Secret the admin
    creates there; its pods reach MinIO through the counting proxy. Yields the namespace."""
    os.chown(volume, 0, 1000)  # the admin's volume: writable by the workspace group (docs/kubernetes.md)
    os.chmod(volume, 0o2775)
    namespace = make_namespace(core, volume)
    relay = TcpRelay(node.state()["gateway"], s3_proxy.port)
    endpoint = f"http://{node.state()['gateway']}:{relay.port}"
    try:
        core.create_namespaced_secret(namespace, {"metadata": {"name": STORAGE_SECRET}, "stringData": {
            "AIRFLOW_CONN_AWS_DEFAULT": aws_connection_json(s3_server.access_key, s3_server.secret_key, endpoint,
                                                            "us-east-1")}})
        yield namespace
    finally:
        relay.close()
        core.delete_namespace(namespace)
        core.delete_persistent_volume(namespace)


def data_plane_env(cluster, namespace: str, image: str) -> dict[str, str]:
    """What an admin sets for Airflow: the cluster's API, the namespace, the cluster's data plane and its Secret."""
    settings = {"NAMESPACE": namespace, "DATA_PLANE": "cluster", "STORAGE_SECRET": STORAGE_SECRET,
                "DATA_PLANE_IMAGE": image}
    return {"AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(cluster.kubeconfig)}}),
            **{f"AIRFLOW__TRAINING_KUBERNETES__{key}": value for key, value in settings.items()}}


def storage_variables() -> list[str]:
    """The storage credentials a test process may hold: Airflow's worker must have none in this mode."""
    return [n for n in os.environ if n.startswith(("AIRFLOW_CONN_AWS", "AIRFLOW_CONN_COS", "AWS_"))]


@pytest.fixture
def cluster_plane(real_cluster, real_admin, platform_image, s3_server, s3_proxy, tmp_path_factory, monkeypatch):
    """A namespace whose workspace volume is a directory of its own, the storage Secret the admin creates there, and
    Airflow pointed at it with no storage connection of its own. Yields (namespace, node volume, proxy)."""
    cluster, node = real_cluster
    volume = tmp_path_factory.mktemp("cluster-volume")
    with storage_namespace(real_admin["core"], node, s3_server, s3_proxy, volume) as namespace:
        for name, value in data_plane_env(cluster, namespace, platform_image).items():
            monkeypatch.setenv(name, value)
        for name in storage_variables():
            monkeypatch.delenv(name)  # the worker has no storage credentials: only the cluster's pods do
        yield namespace, volume, s3_proxy


def _archive(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _data_gets(proxy, bucket: str) -> int:
    return sum(1 for r in proxy.snapshot() if r["method"] == "GET" and f"/{bucket}/data/" in r["path"])


def _recorded_series(job_name: str) -> dict:
    """The launch task's XCom "metric_series" of the last run of training_job (operators/stages/launch_training.py)."""
    _state, conf, _states, series = latest_run(key="metric_series")
    assert conf.get("job_name") == job_name
    assert "launch_training" in series, "launch_training recorded no metric_series"
    return series["launch_training"]


def _series_while_deferred(job_name: str) -> dict | None:
    """The launch task's XCom "metric_series" while the task waits for its trigger (`airflow dags test` runs the
    trigger in-process and keeps the task instance queued meanwhile), else None."""
    _state, conf, states, series = latest_run(key="metric_series")
    if conf.get("job_name") != job_name or states.get("launch_training") not in ("deferred", "queued"):
        return None
    return series.get("launch_training")


def _sync_log(core, namespace: str, job: str) -> str:
    logs = []
    for pod in core.list_namespaced_pod(namespace, label_selector=f"job-name={job}-checkpoint-sync").items:
        try:
            logs.append(core.read_namespaced_pod_log(pod.metadata.name, namespace, container="checkpoint-sync"))
        except Exception as err:  # noqa: BLE001 - a diagnostic only
            logs.append(f"{pod.metadata.name}: {err}")
    return "\n".join(logs)[-4000:]


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()] if root.exists() else []


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _a_retry_after_the_ttl_reports_the_success(batch, namespace: str, job_name: str, volume: Path) -> None:
    """The launch task's retry finds the Job gone (as ttlSecondsAfterFinished leaves it): a step on the cluster's
    volume reads the success marker against the launch the init container recorded, and no second Job trains."""
    from kubernetes.client import V1DeleteOptions

    from operators.launch.base import LaunchRequest
    from operators.launch.kubernetes.launcher import KubernetesLauncherHook

    assert json.loads((volume / "state" / job_name / "kubernetes-job.json").read_text())["uid"]
    batch.delete_namespaced_job(job_name, namespace, body=V1DeleteOptions(propagation_policy="Foreground"))
    deadline = time.monotonic() + 120  # a hang guard
    while batch.list_namespaced_job(namespace, field_selector=f"metadata.name={job_name}").items:
        assert time.monotonic() < deadline, f"Job {job_name} was not deleted"
        time.sleep(0.5)
    hook = KubernetesLauncherHook()
    request = LaunchRequest(job_name=job_name, job_root=f"/workspace/jobs/{job_name}", workspace="/workspace",
                            layout="sagemaker", instance_count=2, hosts=tuple(hook.hosts(job_name, 2)),
                            image_uri=TRAINING_IMAGE, attempt=2)
    said = _Lines()  # what the task log gets (the hook's logger is Airflow's structlog one: a stdlib one in its place)
    hook._log = logging.getLogger("test.retry-after-the-ttl")
    hook._log.setLevel(logging.INFO)
    hook._log.addHandler(said)
    try:
        hook.start(request)
    finally:
        hook._log.removeHandler(said)
    lines = said.lines
    assert any("it succeeded; reporting that instead of training again" in line for line in lines), lines
    assert any(f"[cluster] step outcome: Job {namespace}/{job_name}-outcome created" in line for line in lines), lines
    assert not batch.list_namespaced_job(namespace, field_selector=f"metadata.name={job_name}").items


@pytest.mark.timeout(900)  # the first test also imports the platform image into the node
def test_two_hosts_train_while_the_cluster_moves_every_byte(cluster_plane, object_store, real_admin):
    namespace, volume, proxy = cluster_plane
    bucket = object_store.bucket("plane")
    object_store.put(bucket, "code/code.tar.gz", _archive({"train.py": TRAIN}))
    for i in range(3):
        object_store.put(bucket, f"data/part-{i}.csv", f"rows of part {i}".encode())

    def job(name: str) -> dict:
        return {"job_name": name, "backend": "kubernetes", "image_uri": TRAINING_IMAGE,
                "source_dir": f"s3://{bucket}/code/code.tar.gz", "entry_point": "train.py",
                "inputs": {"train": f"s3://{bucket}/data/"}, "output_path": f"s3://{bucket}/out",
                "instance_count": 2, "resources": {"cpu": "500m", "memory": "256Mi"},
                "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}

    state, states, values, output, seconds = dags_test(job("plane-first"), timeout=600)
    assert state == "success", (failure_reasons(), states, output[-5000:])
    for step in ("stage_code", "prefetch_data", "write_configs", "restore", "upload_artifacts"):
        assert f"[cluster] step {step}: Job {namespace}/" in output, step
        # each step's process ran the engine without importing Airflow (operators/engine/step.py says so in its log)
        assert f"Step {step} done in" in output, step
    assert output.count("; Airflow not imported") >= 5 and "; Airflow was imported" not in output
    for host in ("plane-first-0", "plane-first-1"):
        for i in range(3):
            assert f"{host} reads part-{i}.csv: rows of part {i}" in output
    # The point the script wrote to TRAINING_METRICS_FILE on the cluster's volume came through the pod's log (train
    # echoes it there: runtime/training_runtime/metrics_echo.py), and the task log does not show that line.
    assert values["launch_training"]["metrics"] == {"loss": 0.25, "accuracy": 0.75}
    assert "[training-metric]" not in output
    # no metrics.json on this side: the curves the job page draws are the launch task's record
    series = _recorded_series("plane-first")["series"]
    assert series["loss"][0]["value"] == 0.25
    assert [(p["value"], p["step"]) for p in series["accuracy"]] == [(0.75, 7)]
    # ... and metrics.json among the artifacts, as the shared-volume mode uploads it: written by the upload step
    uploaded = json.loads(object_store.get(bucket, "out/plane-first/output/metrics.json"))
    assert uploaded["final"] == {"loss": 0.25, "accuracy": 0.75} and uploaded["series"]["accuracy"] == series["accuracy"]
    # model.tar.gz: published by the upload step, byte for byte what the pod wrote on the node's volume; the link the
    # job planted is not in it (the step says so in the task's log).
    written = (volume / "jobs" / "plane-first" / "model" / "weights.bin").read_bytes()
    with tarfile.open(fileobj=io.BytesIO(object_store.get(bucket, "out/plane-first/output/model.tar.gz"))) as tar:
        assert sorted(tar.getnames()) == ["weights.bin"]
        assert tar.extractfile("weights.bin").read() == written == bytes(range(256)) * 4096
    assert "Skipped model/passwd in job root" in output and "it is a symbolic link" in output
    assert values["upload_artifacts"]["model_uri"] == f"s3://{bucket}/out/plane-first/output/model.tar.gz"
    # The worker never held a byte of the job: its own workspace has no file of the job, its cache no entry.
    worker = Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"])
    assert _files_under(worker / "jobs" / "plane-first") == []
    assert not any(b"rows of part" in p.read_bytes() for p in _files_under(worker / "cache"))
    # ... but keeps the run's lineage record (the published copy the upload step vouched for by its sha256), where the
    # console and a reproduction read it
    kept = read_record(str(worker), "plane-first")
    assert kept is not None and "kept on this side" in output, output[-3000:]
    assert kept.code.digest == values["stage_code"]["code_digest"] and kept.channels["train"].data_version
    assert kept.image.digest and kept.outcome.status == "succeeded"
    first_gets = _data_gets(proxy, bucket)
    assert first_gets == 3, proxy.snapshot()

    # The same channel again: the cluster's cache has it (no object GET), the new job's pods mount the same entry.
    state, states, _, output, second = dags_test(job("plane-second"), timeout=600)
    assert state == "success", (failure_reasons(), states, output[-5000:])
    assert _data_gets(proxy, bucket) == first_gets, "the second job read the channel from storage again"
    assert "reused" in output and "plane-second-1 reads part-2.csv: rows of part 2" in output
    print(f"\ncluster data plane, 2 hosts: first job {seconds:.1f}s, second (cache hit) {second:.1f}s")
    _a_retry_after_the_ttl_reports_the_success(real_admin["batch"], namespace, "plane-second", volume)


CHECKPOINTING = """\
import os, sys, time
held = sorted(n for n in os.environ if n.startswith(("AIRFLOW_CONN_", "AWS_ACCESS_KEY", "AWS_SECRET", "AWS_SESSION",
                                                     "AWS_ROLE", "AWS_WEB_IDENTITY")))
token = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
print(f"the training holds storage credentials {held} and a service account token: {token}", flush=True)
ck = "/opt/ml/checkpoints"
found = sorted(os.listdir(ck))
if found:
    print(f"resumed from {found[-1]}: {open(os.path.join(ck, found[-1])).read()}", flush=True)
    sys.exit(0)
for epoch in (1, 2):
    with open(os.path.join(ck, f"epoch-{epoch}"), "w") as f:
        f.write(f"state after epoch {epoch}")
    print(f"epoch {epoch} checkpointed loss={1 / epoch}", flush=True)
    time.sleep(8)
sys.exit(1)  # the first job dies after its second epoch
"""


STORAGE_ACCOUNT = "storage-writer"


def _storage_credentials_in(pod, secret: str, account: str) -> list[str]:
    """What in a pod (as the API server admitted it, which is what the kubelet runs) carries the platform's storage
    identity: the storage Secret in any container's env, envFrom or a volume, or the data plane's service account."""
    found = []
    if pod.spec.service_account_name == account:
        found.append(f"service account {account}")
    for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
        if any(source.secret_ref and source.secret_ref.name == secret for source in container.env_from or []):
            found.append(f"{container.name}: envFrom {secret}")
        if any(var.value_from and var.value_from.secret_key_ref and var.value_from.secret_key_ref.name == secret
               for var in container.env or []):
            found.append(f"{container.name}: env from {secret}")
    for volume in pod.spec.volumes or []:
        if volume.secret and volume.secret.secret_name == secret:
            found.append(f"volume {volume.name}: {secret}")
        if volume.projected and any(source.service_account_token for source in volume.projected.sources or []):
            found.append(f"volume {volume.name}: a service account token")
    return found


@pytest.mark.timeout(900)
def test_checkpoints_reach_storage_while_training_runs_and_the_next_job_resumes(cluster_plane, object_store,
                                                                                real_admin, monkeypatch):
    """The checkpoint sync holds the platform's storage identity (the storage Secret, the data plane's service
    account): it runs in a pod of its own, and no container of the training pod (the platform's prepare-job-root
    included) holds either, while checkpoints still reach checkpoint_path as the job trains."""
    import threading

    core = real_admin["core"]
    namespace = cluster_plane[0]
    core.create_namespaced_service_account(namespace, {"metadata": {"name": STORAGE_ACCOUNT}})
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE_SERVICE_ACCOUNT", STORAGE_ACCOUNT)
    monkeypatch.setenv("AIRFLOW__TRAINING__CHECKPOINT_SYNC_SECONDS", "1")
    bucket = object_store.bucket("ckpt")
    object_store.put(bucket, "code/code.tar.gz", _archive({"train.py": CHECKPOINTING}))

    def job(name: str) -> dict:
        return {"job_name": name, "backend": "kubernetes", "image_uri": TRAINING_IMAGE,
                "source_dir": f"s3://{bucket}/code/code.tar.gz", "entry_point": "train.py",
                "output_path": f"s3://{bucket}/out", "checkpoint_path": f"s3://{bucket}/checkpoints/",
                "resources": {"cpu": "500m", "memory": "256Mi"},
                "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}

    first: dict = {}
    running = threading.Thread(target=lambda: first.update(zip(("state", "states", "values", "output", "seconds"),
                                                                dags_test(job("ckpt-first"), timeout=600))))
    running.start()
    seen_while_running = series_while_deferred = None
    pods: dict = {}  # the training's and the sync's pods, as they ran
    while running.is_alive() and not (seen_while_running and series_while_deferred and len(pods) == 2):
        if not seen_while_running and "checkpoints/epoch-1" in object_store.keys(bucket, "checkpoints/"):
            seen_while_running = time.monotonic()
        series_while_deferred = series_while_deferred or _series_while_deferred("ckpt-first")
        for kube_job in ("ckpt-first", "ckpt-first-checkpoint-sync"):
            for pod in core.list_namespaced_pod(namespace, label_selector=f"job-name={kube_job}").items:
                if pod.status.phase == "Running":
                    pods.setdefault(kube_job, pod)
        time.sleep(0.5)
    running.join()
    assert first["state"] == "failed", first["states"]
    # The deferred launch task's curves while the job trained: its trigger recorded them as the task's XCom.
    assert series_while_deferred is not None, first["output"][-4000:]
    assert series_while_deferred["series"]["loss"][0]["value"] == 1.0
    assert "recorded as XCom metric_series" in first["output"]
    assert seen_while_running is not None, "no checkpoint reached checkpoint_path while the job ran; the sync " \
        "said: " + _sync_log(core, namespace, "ckpt-first")
    assert object_store.get(bucket, "checkpoints/epoch-2") == b"state after epoch 2"
    assert "[cluster] checkpoint sync: every checkpoint is in" in first["output"], first["output"][-4000:]
    # Where the platform's identity was: in the sync's own pod only, never in the training's.
    assert set(pods) == {"ckpt-first", "ckpt-first-checkpoint-sync"}, sorted(pods)
    training, sync = pods["ckpt-first"], pods["ckpt-first-checkpoint-sync"]
    assert [c.name for c in training.spec.init_containers or []] == ["prepare-job-root"]
    assert _storage_credentials_in(training, STORAGE_SECRET, STORAGE_ACCOUNT) == []
    assert _storage_credentials_in(sync, STORAGE_SECRET, STORAGE_ACCOUNT) == [
        f"service account {STORAGE_ACCOUNT}", f"checkpoint-sync: envFrom {STORAGE_SECRET}",
        next(f"volume {v.name}: a service account token" for v in sync.spec.volumes if v.projected)]
    # ... and what the tenant's own code found in its container
    assert "the training holds storage credentials [] and a service account token: False" in first["output"]
    assert object_store.get(bucket, "out/ckpt-first/output/failure")  # the runtime's reason, uploaded by the step

    state, states, _, output, _ = dags_test(job("ckpt-second"), timeout=600)
    assert state == "success", (failure_reasons(), states, output[-4000:])
    assert "Restored 2 checkpoint file(s)" in output
    assert "resumed from epoch-2: state after epoch 2" in output


def test_a_step_that_fails_says_why_in_one_line_and_is_not_retried_in_vain(cluster_plane, object_store, monkeypatch):
    bucket = object_store.bucket("fail")
    job = {"job_name": "plane-missing", "backend": "kubernetes", "image_uri": TRAINING_IMAGE,
           "source_dir": f"s3://{bucket}/code/missing.tar.gz", "entry_point": "train.py",
           "output_path": f"s3://{bucket}/out"}
    # The step's storage error no retry can fix: the task fails at once with the step's own line.
    state, states, _, output, _ = dags_test(job, timeout=300)
    assert state == "failed" and states["stage_code"] == "failed" and states["launch_training"] != "success", states
    assert f"s3://{bucket}/code/missing.tar.gz" in output and "[cluster] step stage_code" in output
    assert output.count("[cluster] step stage_code: Job ") == 1, "a permanent failure was retried"
    # A platform image the node cannot pull: the step fails at once naming the setting, instead of waiting.
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE_IMAGE", "training-airflow:no-such-tag")
    state, states, _, output, _ = dags_test({**job, "job_name": "plane-no-image"}, timeout=300)
    assert state == "failed" and states["stage_code"] == "failed", states
    assert "step stage_code cannot start" in output and "check [training.kubernetes] data_plane_image" in output

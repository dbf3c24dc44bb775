"""`airflow dags test training_job` with backend kubernetes on a real node (tools/node/realnode.py): the training
image runs in containerd under the restricted profile, as its own user, with the job root mounted from the
workspace claim, the cluster's DNS for the headless Service, real cgroup memory limits and logs through the API
server. Each test is one CLI run, as a user types it; measurements are printed (pytest -s)."""

from __future__ import annotations

import json
import re
import tarfile
import threading
import time
from pathlib import Path

import hostile_kernel
import pytest

from operators.lineage.record import LineageRecord
from dag_runner import HOSTILE_LINKS, HOSTILE_SCRIPT, assert_nothing_leaked, hostile_world
from real_node import IMAGE, pod_s3_endpoint  # noqa: F401 - a fixture (the real-node fixtures come from conftest.py)
from test_kubernetes_local_cluster_dag import dags_test, failure_reasons

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.usefixtures("airflow_db")]

TRAIN = hostile_kernel.PROBE + """\
import json, os, socket, sys, time
print(f"first line at {time.time():.3f}", flush=True)
print(f"host {socket.gethostname()} uid {os.getuid()} of {len(json.loads(os.environ['SM_HOSTS']))}", flush=True)
print("hostile reached " + ",".join(hostile_reached()) + ".", flush=True)
for i in range(1, 201):
    print(f"step {i:03d}/200 loss={1.0 / i:.4f}")
os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as f:
    f.write("trained on a real node")
"""


@pytest.fixture
def conf(tmp_path):
    def make(job_name: str, script: str = TRAIN, **extra) -> dict:
        code = tmp_path / job_name
        code.mkdir()
        (code / "train.py").write_text(script)
        return {"job_name": job_name, "backend": "kubernetes", "image_uri": IMAGE, "source_dir": str(code),
                "entry_point": "train.py", "output_path": str(tmp_path / "out"),
                "resources": {"cpu": "1", "memory": "512Mi"},
                "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}], **extra}

    return make


class PodClock:
    """When the job's pods were created, started running and finished, seen by polling the API (0.1 s)."""

    def __init__(self, core, namespace: str, job: str):
        self.core, self.namespace, self.job = core, namespace, job
        self.created = self.running = self.done = None
        self.image_ids: set[str] = set()  # the training container's imageID in each pod's status
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"job-name={self.job}").items
            except Exception:  # the namespace may be going away at the end
                pods = []
            now = time.time()
            if pods and self.created is None:
                self.created = now
            self.image_ids.update(c.image_id for p in pods for c in (p.status.container_statuses or [])
                                  if c.name == "train" and c.image_id)
            if self.running is None and any(p.status.phase == "Running" for p in pods):
                self.running = now
            if self.done is None and pods and all(p.status.phase in ("Succeeded", "Failed") for p in pods):
                self.done = now
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.timeout(600)  # also brings the control plane and the node up (image import included)
def test_one_host_runs_the_image_as_its_user_with_every_line_and_the_model(real_namespace, real_admin, conf):
    clock = PodClock(real_admin["core"], real_namespace, "real-one")
    one = conf("real-one")
    state, states, values, output, seconds = dags_test(one, timeout=300)
    clock.stop()
    assert state == "success", (failure_reasons(), states, output[-4000:])
    # The image the pod ran, as its status names it (imageID), published beside the model.
    lineage = LineageRecord.from_json(Path(one["output_path"], "real-one", "output", "lineage.json").read_text())
    [image_id] = clock.image_ids
    assert (lineage.image.backend, lineage.image.name, lineage.image.digest) == ("kubernetes", IMAGE, image_id)
    assert re.search(r"sha256:[0-9a-f]{64}$", image_id), image_id
    assert "host real-one-0 uid 1000 of 1" in output  # the image's user, not root
    assert "hostile reached ." in output  # no sysctl, no sysrq, no /etc/shadow in the pod
    steps = [line[line.index("step "):line.index("step ") + 12] for line in output.splitlines() if "step " in line
             and "/200 loss=" in line]
    assert steps == [f"step {i:03d}/200" for i in range(1, 201)], "a pod log line was lost or repeated"
    assert values["launch_training"]["metrics"] == {"loss": pytest.approx(0.005)}
    first = float(output.split("first line at ")[1].split()[0])
    launch = launch_seconds()
    local = conf("real-one-local")
    local["backend"] = "local"
    local_state, _, _, local_output, local_seconds = dags_test(local, timeout=300)
    assert local_state == "success", local_output[-3000:]
    # The same script on the local backend, through Airflow's root worker: a uid of its own, nothing reached.
    uid = int(local_output.split(" uid ")[1].split()[0])
    assert uid != 0 and "hostile reached ." in local_output, local_output[-3000:]
    def since_created(t):  # the pod watch may miss a short-lived phase: say so rather than fail the figures
        return "?" if t is None or clock.created is None else f"{t - clock.created:.1f}"

    life = None if clock.done is None or clock.created is None else clock.done - clock.created
    print(f"\nreal node, one host: whole DAG {seconds:.1f}s (local backend: {local_seconds:.1f}s); launch_training "
          f"{launch:.1f}s (local backend: {launch_seconds():.1f}s); pod created -> running "
          f"{since_created(clock.running)}s, -> first user line {since_created(first)}s, -> finished "
          f"{since_created(clock.done)}s; our launcher adds "
          f"{'?' if life is None else format(launch - life, '.1f')}s beyond the pod's own life")


def launch_seconds() -> float:
    """How long the last run's launch_training task took (start to end, from Airflow's metadata DB)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.task_id == "launch_training")
                             .order_by(TaskInstance.start_date.desc())).first()
        return (ti.end_date - ti.start_date).total_seconds()


def test_two_hosts_find_each_other_through_the_headless_service(real_namespace, conf):
    # Each host opens a TCP server and connects to the other by the name the runtime gives it (cluster DNS).
    script = """\
import json, os, socket, threading, time
me, hosts = os.environ["SM_CURRENT_HOST"], json.loads(os.environ["SM_HOSTS"])
other = [h for h in hosts if h != me][0]
server = socket.create_server(("0.0.0.0", 7077))
def serve():
    conn, _ = server.accept()
    conn.sendall(me.encode()); conn.close()
threading.Thread(target=serve, daemon=True).start()
for _ in range(300):
    try:
        with socket.create_connection((other, 7077), timeout=2) as c:
            print(f"{me} reached {other} at {c.getpeername()[0]}: it says {c.recv(100).decode()}", flush=True)
            break
    except OSError:
        time.sleep(0.2)
else:
    raise SystemExit(f"{me} could not reach {other}")
time.sleep(3)  # let the other host connect to us too
"""
    state, states, _, output, seconds = dags_test(conf("real-two", script, instance_count=2), timeout=300)
    assert state == "success", (failure_reasons(), states, output[-4000:])
    # The runtime names the hosts by their pod's name in the headless Service (`real-two-0.real-two`).
    for me, other in (("real-two-0", "real-two-1"), ("real-two-1", "real-two-0")):
        assert f"{me}.real-two reached {other}.real-two at 10.213." in output, output[-4000:]
        assert f"it says {other}.real-two" in output
    print(f"\nreal node, two hosts over DNS: {seconds:.1f}s")


def test_user_failure_fails_with_its_message(real_namespace, conf):
    script = "raise ValueError('learning rate must be positive')\n"
    state, states, _, output, _ = dags_test(conf("real-user-error", script), timeout=300)
    assert state == "failed" and states["launch_training"] == "failed", states
    assert "ValueError: learning rate must be positive" in output
    assert "exit code 1" in output


def test_memory_limit_is_a_real_oom_kill(real_namespace, conf):
    script = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 1024 * 1024))\n"
    state, states, _, output, _ = dags_test(conf("real-oom", script, resources={"cpu": "1", "memory": "256Mi"}),
                                            timeout=300)
    assert state == "failed" and states["launch_training"] == "failed", states
    assert "resources.memory" in output, output[-4000:]


# The image has no boto3: the script signs its S3 request (AWS Signature V4) with the standard library, as an SDK would.
S3_READER = """\
import datetime, hashlib, hmac, os, urllib.request

def s3_get(endpoint, bucket, key):
    host, now = endpoint.split("://")[1], datetime.datetime.now(datetime.timezone.utc)
    stamp, day, empty = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d"), hashlib.sha256(b"").hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    request = f"GET\\n/{bucket}/{key}\\n\\nhost:{host}\\nx-amz-content-sha256:{empty}\\nx-amz-date:{stamp}\\n\\n{signed}\\n{empty}"
    scope = f"{day}/us-east-1/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\\n{stamp}\\n{scope}\\n{hashlib.sha256(request.encode()).hexdigest()}"
    k = ("AWS4" + os.environ["AWS_SECRET_ACCESS_KEY"]).encode()
    for part in (day, "us-east-1", "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    auth = (f"AWS4-HMAC-SHA256 Credential={os.environ['AWS_ACCESS_KEY_ID']}/{scope}, SignedHeaders={signed}, "
            f"Signature={signature}")
    headers = {"x-amz-date": stamp, "x-amz-content-sha256": empty, "Authorization": auth}
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}/{key}", headers=headers), timeout=20) as r:
        return r.read().decode()

channel = os.environ["SM_CHANNEL_TRAIN"]
for name in sorted(os.listdir(channel)):
    print(f"channel file {name}: {open(os.path.join(channel, name)).read().strip()}", flush=True)
print("read from S3 with the Secret's credentials: " + s3_get(os.environ["S3_ENDPOINT"], os.environ["BUCKET"],
                                                              "extra/notes.txt"), flush=True)
"""


def test_s3_channel_and_credentials_from_a_secret(real_namespace, real_admin, conf, storage_connections, object_store,
                                                  s3_server, pod_s3_endpoint, monkeypatch):
    # The worker fetches the channel (aws_default) into the workspace cache; the pod mounts it read-only. The
    # script's own S3 access uses credentials that reach the pod only through a Kubernetes Secret (secretKeyRef).
    bucket = object_store.bucket("real")
    for i in range(3):
        object_store.put(bucket, f"data/part-{i}.csv", f"rows of part {i}".encode())
    object_store.put(bucket, "extra/notes.txt", b"notes only the pod reads")
    # the admin lets training_job runs name this Secret ([training] secret_references; default: none)
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES",
                       '{"training_job": {"kubernetes_secrets": ["s3-credentials"]}}')
    real_admin["core"].create_namespaced_secret(real_namespace, {
        "metadata": {"name": "s3-credentials"},
        "stringData": {"access_key": s3_server.access_key, "secret_key": s3_server.secret_key}})
    job = conf("real-s3", S3_READER, inputs={"train": f"s3://{bucket}/data/"},
               environment={"S3_ENDPOINT": pod_s3_endpoint, "BUCKET": bucket},
               kubernetes={"keep_finished_jobs": True, "secret_env": {
                   "AWS_ACCESS_KEY_ID": "s3-credentials/access_key",
                   "AWS_SECRET_ACCESS_KEY": "s3-credentials/secret_key"}})
    state, states, _, output, seconds = dags_test(job, timeout=300)
    assert state == "success", (failure_reasons(), states, output[-4000:])
    for i in range(3):
        assert f"channel file part-{i}.csv: rows of part {i}" in output
    assert "read from S3 with the Secret's credentials: notes only the pod reads" in output
    assert s3_server.secret_key not in output
    pod_spec = real_admin["batch"].read_namespaced_job("real-s3", real_namespace).spec.template.spec
    env = {e.name: e for e in pod_spec.containers[0].env}
    assert env["AWS_SECRET_ACCESS_KEY"].value is None
    assert env["AWS_SECRET_ACCESS_KEY"].value_from.secret_key_ref.name == "s3-credentials"
    mounts = {m.mount_path: m for m in pod_spec.containers[0].volume_mounts}
    assert mounts["/opt/ml/input/data/train"].read_only is True  # the cache entry, shared, never written by a job
    print(f"\nreal node, S3 channel + Secret: {seconds:.1f}s")


PAI_TRAIN = """\
import json, os, sys
print("argv " + json.dumps(sys.argv[1:]), flush=True)
print("code in " + os.environ["PAI_WORKING_DIR"], flush=True)
data = os.environ["PAI_INPUT_TRAIN"]
print(f"input {data}: {sorted(os.listdir(data))}", flush=True)
os.makedirs(os.environ["PAI_OUTPUT_MODEL"], exist_ok=True)
with open(os.path.join(os.environ["PAI_OUTPUT_MODEL"], "model.txt"), "w") as f:
    f.write("pai")
print("model in " + os.environ["PAI_OUTPUT_MODEL"], flush=True)
"""


def test_pai_layout_with_a_command(real_namespace, conf, tmp_path):
    data = tmp_path / "pai-data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    job = conf("real-pai", PAI_TRAIN, layout="pai", command="python train.py $PAI_USER_ARGS",
               hyperparameters={"epochs": 3, "note": "a b; $(id)"}, inputs={"train": str(data)})
    del job["entry_point"]
    state, states, values, output, seconds = dags_test(job, timeout=300)
    assert state == "success", (failure_reasons(), states, output[-4000:])
    # The hyperparameters arrive as separate arguments, the shell's metacharacters untouched.
    assert 'argv ["--epochs", "3", "--note", "a b; $(id)"]' in output, output[-4000:]
    assert "code in /ml/usercode" in output and "input /ml/input/data/train/: ['a.txt']" in output, output[-4000:]
    assert "model in /ml/output/model/" in output
    print(f"\nreal node, PAI layout with a command: {seconds:.1f}s")


@pytest.mark.timeout(600)
def test_links_a_pod_leaves_in_the_job_root_leak_nothing_and_overwrite_nothing(real_namespace, conf, tmp_path):
    """Issue 23 on real pods: the worker reads the job root on the workspace volume after the pods wrote it."""
    world = hostile_world(tmp_path)
    ckpt = tmp_path / "ckpt"
    state, states, values, output, _ = dags_test(
        conf("real-hostile", HOSTILE_SCRIPT, hyperparameters=world["hyperparameters"], checkpoint_path=str(ckpt)),
        timeout=300)
    assert state == "success", (failure_reasons(), states, output[-4000:])
    out = tmp_path / "out" / "real-hostile" / "output"
    with tarfile.open(out / "model.tar.gz") as tf:
        assert tf.getnames() == ["model.json"]
    with tarfile.open(out / "output.tar.gz") as tf:
        assert tf.getnames() == ["predictions.txt"]
    # the job's one regular file, and the platform's claim of the checkpoint_path (docs/security.md)
    assert sorted(p.name for p in ckpt.rglob("*")) == [".training-owner.json", "real.pt"], "\n".join(
        line[:300] for line in output.splitlines() if "heckpoint" in line or "Skipped" in line or "hostile" in line)
    for link in HOSTILE_LINKS:
        assert f"Skipped {link} " in output, link
    blobs = {str(p): p.read_bytes() for p in [*out.iterdir(), *ckpt.rglob("*")] if p.is_file()}
    assert_nothing_leaked(world, {**blobs, "xcom": json.dumps(values).encode(), "log": output.encode()})

"""The training_job DAG with backend kubernetes, end to end: the real operator defers, dag.test() runs the trigger
in-line, the real Kubernetes clients talk to the fake API server on loopback, and a fake kubelet runs each pod's
`train` on the shared workspace (honouring the pod's read-only channel mounts) and reports its log and exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dag_runner import load_dag, run_dag
from fake_kube_api import INDEX_KEY, FakeKubeApi

pytestmark = pytest.mark.usefixtures("airflow_db")


class FakeKubelet(threading.Thread):
    """Runs every new pod of the fake cluster as a local `train` process on the workspace."""

    def __init__(self, api: FakeKubeApi, workspace: Path):
        super().__init__(daemon=True)
        self.api, self.workspace, self.started = api, workspace, set()
        self.stopping = threading.Event()
        self.mounting = threading.Lock()

    def run(self):
        while not self.stopping.wait(0.1):
            for (_, name), pod in list(self.api.pods.items()):
                if name not in self.started and pod["status"].get("phase") == "Pending":
                    self.started.add(name)
                    threading.Thread(target=self.run_pod, args=(name,), daemon=True).start()

    def run_pod(self, name: str):
        try:
            self._run_pod(name)
        except Exception as err:  # a broken fake must fail the pod, not hang the test
            self.api.terminate(name, 4, message=f"fake kubelet: {err!r}")

    def _run_pod(self, name: str):
        pod = self.api.pod(name)
        container = pod["spec"]["containers"][0]
        root_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == container["args"][-1])
        job_root = self.workspace / root_mount["subPath"]
        for mount in container["volumeMounts"]:
            if "/input/data/" in mount["mountPath"]:
                assert mount["readOnly"] is True
                channel = job_root / "input" / "data" / Path(mount["mountPath"]).name
                with self.mounting:
                    if not channel.is_symlink():  # hosts share the job root: the first pod "mounts" it
                        channel.rmdir()  # the empty mount point the pipeline left
                        channel.symlink_to(self.workspace / mount["subPath"])
        self.api.set_running(name)
        # No cluster DNS here: the pods' host names (<job>-<i>.<job>) never resolve, so the runtime must not wait
        # for them (a real cluster's headless Service gives them; tests/integration/test_kubernetes_cluster.py).
        env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": pod["metadata"]["annotations"][INDEX_KEY],
               "TRAINING_HOST_WAIT_SECONDS": "0"}
        proc = subprocess.Popen([sys.executable, "-m", "training_runtime", "--root", str(job_root)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            self.api.log(name, line.rstrip("\n"))
        self.api.terminate(name, proc.wait())


@pytest.fixture
def cluster(tmp_path, monkeypatch, airflow_home):
    api = FakeKubeApi().start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(api.kubeconfig("training")))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT",
                       json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}))
    kubelet = FakeKubelet(api, Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"]))
    kubelet.start()
    yield api
    kubelet.stopping.set()
    api.stop()


def test_two_host_job_on_kubernetes_defers_and_publishes_the_model(cluster, storage_connections, object_store):
    bucket = object_store.bucket()
    object_store.put(bucket, "code/train.py", textwrap.dedent('''
        import json, os
        host, hosts = os.environ["TM_CURRENT_HOST"], json.loads(os.environ["TM_HOSTS"])
        rows = open(os.path.join(os.environ["TM_CHANNEL_TRAIN"], "rows.csv")).read().split()
        print(f"host={host} rank={os.environ['RANK']} rows={len(rows)} loss=0.25", flush=True)
        if hosts.index(host) == 0:
            json.dump({"hosts": hosts, "rows": len(rows), "master": os.environ["MASTER_ADDR"]},
                      open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w"))
    ''').encode())
    object_store.put(bucket, "data/rows.csv", b"1\n2\n")
    conf = {"job_name": "k8s-two", "backend": "kubernetes", "image_uri": "training-base:latest",
            "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py", "instance_count": 2,
            "distribution": "pytorch", "inputs": {"train": f"s3://{bucket}/data/"},
            "output_path": f"s3://{bucket}/models", "resources": {"cpu": "1", "memory": "1Gi"},
            "kubernetes": {"namespace": "training"},
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    state, states, values = run_dag(load_dag("training_job.py", "training_job"), conf)
    assert state == "success", states
    assert cluster.count("POST", r"/apis/batch/v1/namespaces/training/jobs$") == 1
    assert values["launch_training"]["metrics"] == {"loss": 0.25}
    import io
    import tarfile

    data = object_store.get(bucket, "models/k8s-two/output/model.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        model = json.load(tar.extractfile("model.json"))
    assert model == {"hosts": ["k8s-two-0.k8s-two", "k8s-two-1.k8s-two"], "rows": 2, "master": "k8s-two-0.k8s-two"}

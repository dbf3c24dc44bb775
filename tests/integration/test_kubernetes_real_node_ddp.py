"""Two-host PyTorch DDP (gloo) on real pods: training-torch:latest (5 GB) imported into the node's containerd, two
pods of one Indexed Job finding the master through the headless Service, the all-reduce checked in the task log and
in the published model. The image is imported once per machine (tools/node/images.py keeps containerd's store in the
tools cache): the first run here spends its import time, later runs find the image by its ID."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import time

import pytest

from dag_runner import DDP_SCRIPT
from test_kubernetes_local_cluster_dag import dags_test, failure_reasons

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.usefixtures("airflow_db")]
TORCH_IMAGE = os.environ.get("TRAINING_TORCH_IMAGE", "training-torch:latest")


@pytest.fixture(scope="module")
def torch_image(real_cluster) -> str:
    if subprocess.run(["docker", "image", "inspect", TORCH_IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"the image {TORCH_IMAGE} is not in the local Docker engine: run `make images` (make test does)")
    started = time.monotonic()
    real_cluster[1].import_images([TORCH_IMAGE])
    print(f"\n{TORCH_IMAGE} in the node's containerd after {time.monotonic() - started:.1f}s")
    return TORCH_IMAGE


@pytest.mark.timeout(1200)  # the first run on a machine imports the 5 GB image
def test_two_host_ddp_all_reduce_on_real_pods(real_namespace, torch_image, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(DDP_SCRIPT)
    conf = {"job_name": "real-ddp", "backend": "kubernetes", "image_uri": torch_image, "source_dir": str(code),
            "entry_point": "train.py", "instance_count": 2, "distribution": "pytorch",
            # Two pods on a 2-core node: each asks for half a core, so both are scheduled at once.
            "resources": {"cpu": "500m", "memory": "2Gi"}, "output_path": str(tmp_path / "out"),
            "metric_definitions": [{"Name": "allreduce", "Regex": "allreduce=([0-9.]+)"}], "max_run_seconds": 600}
    state, states, values, output, seconds = dags_test(conf, timeout=900)
    assert state == "success", (failure_reasons(), states, output[-4000:])
    for rank in (0, 1):  # each rank's line, prefixed with its host, reached the task log
        assert f"rank={rank} world=2 allreduce=3.0" in output, output[-4000:]
    assert values["launch_training"]["metrics"] == {"allreduce": 3.0}
    with tarfile.open(tmp_path / "out" / "real-ddp" / "output" / "model.tar.gz") as tar:
        model = json.load(io.BytesIO(tar.extractfile("model.json").read()))
    assert model["sum"] == 3.0 and model["world"] == 2
    assert model["hosts"] == ["real-ddp-0.real-ddp", "real-ddp-1.real-ddp"] and model["master"] == model["hosts"][0]
    print(f"\nreal node, two-host DDP (gloo): whole DAG {seconds:.1f}s")

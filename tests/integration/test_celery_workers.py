"""Several Airflow workers (docs/operations.md): Airflow's CeleryExecutor with Redis as its broker (Debian's
redis-server, tests/integration/redis_server.py) and PostgreSQL as the metadata DB and Celery's result backend; two
Celery workers that share no directory (each its own AIRFLOW_HOME, task logs and [training] workspace), over the
cluster's data plane on the real node ([training.kubernetes] data_plane = cluster).

Nothing of a job is on a worker's disk there, so any worker may run any stage of it: the test kills the worker that
follows the training (the worker and every process under it, as a lost machine would), and the other worker takes
the retried task over, reattaches to the running Job and finishes the run. Non-deferrable, so that a worker, not the
triggerer, follows the training.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from airflow_server import REPO, airflow_deployment, free_port
from redis_server import redis_server  # noqa: F401 - a fixture
from test_kubernetes_cluster_data_plane import (  # noqa: F401 - platform_image is a fixture
    TRAINING_IMAGE, _archive, _files_under, data_plane_env, platform_image, storage_namespace, storage_variables,
)
from test_production_deployment import FAST_RECOVERY, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1200)]

WORKERS = ("worker-a", "worker-b")

# Counts its starts in its output directory (on the cluster's volume), prints a step a second for a minute, writes
# a model.
TRAIN = """\
import os, time
out = os.environ["SM_OUTPUT_DATA_DIR"]
with open(os.path.join(out, "starts"), "a") as f:
    f.write(f"{os.getpid()}\\n")
data = os.environ["SM_CHANNEL_TRAIN"]
print("read", open(os.path.join(data, "part-0.csv")).read(), flush=True)
for step in range(60):
    print(f"step {step} loss={1.0 / (step + 1):.3f}", flush=True)
    time.sleep(1)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.bin"), "wb") as f:
    f.write(bytes(range(256)) * 64)
"""


class CeleryDeployment:
    def __init__(self, server, volume: Path, namespace: str):
        self.server, self.volume, self.namespace = server, volume, namespace

    def worker_home(self, name: str) -> Path:
        return self.server.home / name


@pytest.fixture  # the one test of the module; s3_proxy is per test
def celery_deployment(tmp_path_factory, postgres_server, redis_server, real_cluster, real_admin,  # noqa: F811
                      platform_image, s3_server, s3_proxy):  # noqa: F811
    cluster, node = real_cluster
    volume = tmp_path_factory.mktemp("celery-volume")
    with storage_namespace(real_admin["core"], node, s3_server, s3_proxy, volume) as namespace, \
            pytest.MonkeyPatch.context() as patch:
        for name in storage_variables():
            patch.delenv(name)  # no component of this Airflow holds a storage credential: only the cluster's pods
        env = {**FAST_RECOVERY, **data_plane_env(cluster, namespace, platform_image),
               "AIRFLOW__TRAINING_KUBERNETES__DEFERRABLE": "False",
               "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
               "AIRFLOW__CELERY__BROKER_URL": redis_server.url,
               "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2"}
        with airflow_deployment(tmp_path_factory, postgres_server, extra_env=env, name="airflow-celery") as server:
            deployment = CeleryDeployment(server, volume, namespace)
            for i, name in enumerate(WORKERS):
                _start_worker(deployment, name, log_port=server.env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"]
                              if i == 0 else str(free_port()))
            for name in WORKERS:
                wait_for(f"Celery worker {name} ready", lambda n=name: " ready." in server.log_tail(n, 100_000),
                         timeout=240, server=server)
            yield deployment


def _start_worker(deployment: CeleryDeployment, name: str, log_port: str) -> None:
    """A Celery worker in a home of its own: its airflow.cfg, task logs and [training] workspace are its alone. The
    first serves its logs on the port the API server asks (the UI reads them); two log servers cannot share it here."""
    home = deployment.worker_home(name)
    (home / "workspace").mkdir(parents=True)
    shutil.copy(REPO / "airflow.cfg", home / "airflow.cfg")
    env = {"AIRFLOW_HOME": str(home), "AIRFLOW__TRAINING__WORKSPACE": str(home / "workspace"),
           "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": log_port,
           "AIRFLOW__CORE__HOSTNAME_CALLABLE": "worker_hostname.hostname", "TRAINING_TEST_WORKER_NAME": name,
           "PYTHONPATH": f"{deployment.server.env['PYTHONPATH']}:{REPO / 'tests' / 'integration'}"}
    deployment.server.start_component(name, ["celery", "worker", "--celery-hostname", f"{name}@%h",
                                             "--without-mingle", "--without-gossip"], env=env)


def _tries(server, run_id: str, task_id: str) -> list[dict]:
    status, body = server.api.call("GET", f"/api/v2/dags/training_job/dagRuns/{run_id}/taskInstances/{task_id}/tries")
    assert status == 200, body
    return sorted(body["task_instances"], key=lambda t: t["try_number"])


def _training_holder(server, run_id: str, starts: Path) -> str | None:
    """The worker running launch_training once the training has started (its first line is in the volume)."""
    if not starts.is_file():
        return None
    _, ti = server.api.call("GET", f"/api/v2/dags/training_job/dagRuns/{run_id}/taskInstances/launch_training")
    return ti.get("hostname") if ti.get("state") == "running" else None


def _local_log(home: Path, run_id: str, task_id: str, try_number: int) -> str:
    found = list((home / "logs").rglob(f"run_id={run_id}/task_id={task_id}/attempt={try_number}.log"))
    return found[0].read_text(errors="replace") if found else ""


def test_a_job_s_stages_run_on_both_workers_and_a_lost_worker_leaves_the_training_to_the_other(celery_deployment,
                                                                                             object_store):
    deployment = celery_deployment
    server = deployment.server
    bucket = object_store.bucket("celery")
    object_store.put(bucket, "code/code.tar.gz", _archive({"train.py": TRAIN}))
    object_store.put(bucket, "data/part-0.csv", b"rows of part 0")
    name = "celery-job"
    started = time.monotonic()
    server.trigger("training_job", {
        "job_name": name, "backend": "kubernetes", "image_uri": TRAINING_IMAGE,
        "source_dir": f"s3://{bucket}/code/code.tar.gz", "entry_point": "train.py",
        "inputs": {"train": f"s3://{bucket}/data/"}, "output_path": f"s3://{bucket}/out",
        "resources": {"cpu": "500m", "memory": "256Mi"},
        "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}, run_id=name)

    starts = deployment.volume / "jobs" / name / "output" / "data" / "starts"
    victim = wait_for("the training to start under a worker", lambda: _training_holder(server, name, starts),
                      timeout=600, server=server)
    assert victim in WORKERS, victim
    survivor = next(w for w in WORKERS if w != victim)
    killed_at = time.monotonic()
    server.kill_tree(victim)  # no on_kill, no heartbeat, no goodbye to the broker

    run = server.wait_for_run("training_job", name, timeout=900)
    assert run["state"] == "success", (server.task_states("training_job", name), server.log_tail("scheduler"),
                                       server.log_tail(survivor))
    # The killed try failed by its missing heartbeat; the retry ran on the other worker and reattached to the Job
    # (the training started once), which finished the run there.
    launch = _tries(server, name, "launch_training")
    assert [(t["hostname"], t["state"]) for t in launch] == [(victim, "failed"), (survivor, "success")], launch
    retry_log = _local_log(deployment.worker_home(survivor), name, "launch_training", 2)
    assert f"Reattaching to Job {deployment.namespace}/{name}" in retry_log, retry_log[-3000:]
    assert "step 59 loss=0.017" in retry_log
    assert len(starts.read_text().splitlines()) == 1, "the training was started again"
    hosts = {t["hostname"] for task in ("validate_spec", "stage_code", "prefetch_data", "write_configs", "restore",
                                        "upload_artifacts", "publish_model") for t in _tries(server, name, task)}
    assert hosts <= set(WORKERS), hosts
    for task in ("upload_artifacts", "publish_model"):  # after the loss: on the survivor
        assert [t["hostname"] for t in _tries(server, name, task)] == [survivor], task

    # The model the pod wrote, uploaded from the cluster; neither worker's disk held a byte of the job.
    with tarfile.open(fileobj=io.BytesIO(object_store.get(bucket, f"out/{name}/output/model.tar.gz"))) as tar:
        assert tar.extractfile("weights.bin").read() == bytes(range(256)) * 64
    # metrics.json too: the series the surviving worker matched, handed by the upload task to its step
    metrics = json.loads(object_store.get(bucket, f"out/{name}/output/metrics.json"))
    assert metrics["final"] == {"loss": 0.017} and len(metrics["series"]["loss"]) >= 1
    for worker in WORKERS:
        workspace = deployment.worker_home(worker) / "workspace"
        # No byte of the job; the worker that ran the upload keeps the run's lineage record (platform state the upload
        # step carried back, for the console and Reproduce), nothing else.
        kept = [workspace / "state" / name / "lineage.json"] if worker == survivor else []
        assert [p for p in _files_under(workspace) if name in str(p)] == kept, worker
    print(f"\nCelery, 2 workers: run {time.monotonic() - started:.0f}s, of which "
          f"{time.monotonic() - killed_at:.0f}s after {victim} was lost")

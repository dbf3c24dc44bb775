"""The production shape (docs/operations.md): PostgreSQL as the metadata DB (Debian's package, a private cluster per
session), the api-server, scheduler (LocalExecutor: its task workers are its own child processes), dag-processor
and triggerer as separate processes, runs triggered over the REST API; and what users see when those processes are
killed or restarted mid-run.

Each kill test checks what a user would: the run ends in success, the training script ran once (it appends a line
to a file in its job root on every start), and the model was uploaded once.
"""

from __future__ import annotations

import json
import re
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from airflow_server import airflow_deployment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # waits of up to 240 + 300 s, each with its own message

# Short retry delay and heartbeat timeout: a killed task is retried in seconds, not the default 5 + 5 minutes.
FAST_RECOVERY = {
    "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    # the Variable the mark-failed test's job references ([training] secret_references; default: none)
    "AIRFLOW__TRAINING__SECRET_REFERENCES": json.dumps({"training_job": {"variables": ["mark_failed_token"]}}),
}
# A job's namespace is the admin's choice (docs/security.md): each Kubernetes test's namespace is a profile it names.
PROFILES = {"prod-triggerer-restart": {"namespace": "prod-triggerer-restart"},
            "prod-mark-failed": {"namespace": "prod-mark-failed"}}

# The training: counts its starts in the job root, prints a numbered line a second, writes a model.
SCRIPT = """
    import os, sys, time
    root = os.path.dirname(os.environ["SM_MODEL_DIR"].rstrip("/"))  # the job root, on the worker or in a container
    with open(os.path.join(root, "starts"), "a") as f:
        f.write(f"{os.getpid()}\\n")
    steps = int(os.environ.get("STEPS", "10"))
    for step in range(steps):
        print(f"step {step} loss={1.0 / (step + 1):.3f}", flush=True)
        time.sleep(1)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as f:
        f.write("trained\\n")
"""


@pytest.fixture(scope="module")
def production(tmp_path_factory, postgres_server):
    env = {**FAST_RECOVERY, "AIRFLOW__TRAINING_KUBERNETES__PROFILES": json.dumps(PROFILES)}
    with airflow_deployment(tmp_path_factory, postgres_server, extra_env=env, name="airflow-production") as server:
        server.postgres = postgres_server
        yield server


def job_conf(tmp_path: Path, name: str, steps: int = 10, **extra) -> dict:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(textwrap.dedent(SCRIPT))
    return {"job_name": name, "source_dir": str(code), "entry_point": "train.py",
            "output_path": str(tmp_path / "models"), "environment": {"STEPS": str(steps)}, **extra}


def job_root(server, name: str) -> Path:
    return server.home / "workspace" / "jobs" / name


def job_state(server, name: str) -> Path:
    """The job's platform state (operators/state/job_state.py): outside the job root."""
    return server.home / "workspace" / "state" / name


def wait_for(what: str, check, timeout: float = 120, server=None):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if server is not None:
            server._check_alive()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def task_log(server, run_id: str, task_id: str, try_number: int) -> str:
    path = f"/api/v2/dags/training_job/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
    status, body = server.api.call("GET", path + "?full_content=true")
    if status == 404:  # the task has not started yet
        return ""
    assert status == 200, body
    content = body.get("content", body)
    if isinstance(content, list):
        return "\n".join(str(e.get("event", e)) if isinstance(e, dict) else str(e) for e in content)
    return str(content)


def assert_trained_once_and_uploaded(server, tmp_path: Path, name: str) -> None:
    starts = (job_root(server, name) / "starts").read_text().split()
    assert len(starts) == 1, f"the training script started {len(starts)} times"
    model = tmp_path / "models" / name / "output" / "model.tar.gz"
    assert model.is_file(), "no model.tar.gz was uploaded"


def test_runs_triggered_over_rest_complete_on_postgresql_with_separate_components(production, tmp_path):
    server = production
    # Every component is its own process, all on the same PostgreSQL database.
    assert set(server.procs) == {"api-server", "scheduler", "dag-processor", "triggerer"}
    assert len({p.pid for p in server.procs.values()}) == 4 and all(p.poll() is None for p in server.procs.values())
    assert server.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    status, config = server.api.call("GET", "/api/v2/monitor/health")
    assert config["metadatabase"]["status"] == "healthy"

    run = server.trigger("training_job", job_conf(tmp_path, "prod-smoke", steps=2), run_id="prod-smoke")
    assert server.wait_for_run("training_job", run["dag_run_id"])["state"] == "success"
    # The run, its task instances and the scheduler's job rows are PostgreSQL's rows.
    rows = server.postgres.sql("SELECT task_id, state FROM task_instance WHERE run_id = 'prod-smoke'",
                               database="airflow_production")
    assert dict(rows)["upload_artifacts"] == "success" and len(rows) == 8
    executors = server.postgres.sql("SELECT DISTINCT executor FROM task_instance WHERE run_id = 'prod-smoke'",
                                    database="airflow_production")
    assert_trained_once_and_uploaded(server, tmp_path, "prod-smoke")
    assert executors in ([(None,)], [("LocalExecutor",)]), executors


def test_a_scheduler_killed_mid_run_is_started_again_and_the_run_completes(production, tmp_path):
    server = production
    name = "prod-scheduler-kill"
    server.trigger("training_job", job_conf(tmp_path, name, steps=12), run_id=name)
    wait_for("the training to start", lambda: (job_root(server, name) / "starts").is_file(), server=server)
    server.kill("scheduler")  # kill -9 of the scheduler's process (its executor's workers are its children)
    killed = time.monotonic()
    time.sleep(3)
    server.restart("scheduler")
    run = server.wait_for_run("training_job", name, timeout=300)
    assert run["state"] == "success", server.log_tail("scheduler")
    assert (tmp_path / "models" / name / "output" / "model.tar.gz").is_file()
    _, launch = server.api.call("GET", f"/api/v2/dags/training_job/dagRuns/{name}/taskInstances/launch_training")
    starts = len((job_root(server, name) / "starts").read_text().split())
    print(f"scheduler kill: run done {time.monotonic() - killed:.0f}s after the kill; launch_training try "
          f"{launch['try_number']}, training started {starts} time(s)")


def test_a_killed_worker_s_task_is_retried_and_reattaches_to_the_running_training(production, tmp_path):
    server = production
    name = "prod-worker-kill"
    server.trigger("training_job", job_conf(tmp_path, name, steps=25), run_id=name)
    state = job_state(server, name)
    wait_for("the training's second step", lambda: "step 2" in _read(state / "launch" / "algo-1.log"), server=server)
    sandbox_pid = json.loads((state / "launch-pids.json").read_text())[0][0]
    task = psutil.Process(sandbox_pid).parent()  # the task process: runs launch_training, launched the training
    supervisor = task.parent()  # LocalExecutor's worker process: the task SDK supervisor
    scheduler = psutil.Process(server.procs["scheduler"].pid)
    assert scheduler in supervisor.parents(), "the task did not run in a worker of the scheduler's LocalExecutor"
    for proc in (supervisor, task):  # kill -9 of the worker: no on_kill, no cleanup, no heartbeat any more
        proc.kill()
    assert psutil.pid_exists(sandbox_pid), "the training died with the worker"

    run = server.wait_for_run("training_job", name, timeout=300)
    assert run["state"] == "success", server.log_tail("scheduler")
    _, tis = server.api.call("GET", f"/api/v2/dags/training_job/dagRuns/{name}/taskInstances/launch_training")
    assert tis["try_number"] == 2, tis  # the killed try failed by its missing heartbeat, the retry succeeded
    retry_log = task_log(server, name, "launch_training", 2)
    assert "Reattached to the training" in retry_log and "step 24" in retry_log
    assert_trained_once_and_uploaded(server, tmp_path, name)
    _, upload = server.api.call("GET", f"/api/v2/dags/training_job/dagRuns/{name}/taskInstances/upload_artifacts")
    assert upload["try_number"] == 1 and upload["state"] == "success"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.cluster
def test_a_triggerer_restarted_while_a_kubernetes_job_waits_shows_no_log_line_twice(production, kube_cluster,
                                                                                    kube_admin, tmp_path):
    from kube_cluster import PLAY, make_namespace

    server = production
    namespace = make_namespace(kube_admin["core"], server.home / "workspace", name="prod-triggerer-restart")
    try:
        extra = json.dumps({"kube_config_path": str(kube_cluster.kubeconfig)})
        status, body = server.api.call("POST", "/api/v2/connections", {
            "connection_id": "kubernetes_default", "conn_type": "kubernetes", "extra": extra})
        assert status in (201, 409), body
        name = "prod-triggerer-restart"
        code = tmp_path / "code"
        code.mkdir()
        (code / "train.py").write_text("print('kwok plays this container')\n")
        server.trigger("training_job", {
            "job_name": name, "backend": "kubernetes", "image_uri": "training-base:latest",
            "source_dir": str(code), "entry_point": "train.py", "output_path": str(tmp_path / "models"),
            "resources": {"cpu": "1", "memory": "1Gi"},
            # kwok's container "runs" 90 s; its log (tools/k8s: 500 numbered lines) is served at once
            "kubernetes": {"profile": namespace, "annotations": {PLAY + "run": "90s"}}}, run_id=name)

        def streamed() -> str:
            ti = server.api.call("GET", f"/api/v2/dags/training_job/dagRuns/{name}/taskInstances/launch_training")[1]
            return ti.get("state") == "deferred" and "line 0500/500" in task_log(server, name, "launch_training", 1)

        wait_for("the deferred task's log to show the pod's whole log", streamed, timeout=240, server=server)
        restarted = time.monotonic()
        server.restart("triggerer")  # SIGTERM (a deploy, a node drain), then a fresh triggerer
        print(f"triggerer restarted in {time.monotonic() - restarted:.1f}s")
        run = server.wait_for_run("training_job", name, timeout=300)
        log = task_log(server, name, "launch_training", 1)
        assert run["state"] == "success", log[-4000:]
        numbered = re.findall(r"line (\d{4})/500 epoch", log)
        assert numbered == [f"{i:04d}" for i in range(1, 501)], "a pod log line was lost or repeated"
        assert "resuming the logs of 1 pod(s) where an earlier watch left them" in log
    finally:
        kube_admin["core"].delete_namespace(namespace)
        kube_admin["core"].delete_persistent_volume(namespace)


@pytest.mark.cluster
def test_marking_a_deferred_kubernetes_task_failed_deletes_its_job_through_the_triggerer(production, kube_cluster,
                                                                                        kube_admin, tmp_path):
    """The user's "mark failed" on a deferred task: no worker holds the task, so the triggerer's on_kill must stop
    the Job. A real API server and a real triggerer; kwok plays the kubelet (the deletes are all API-side)."""
    from kube_cluster import PLAY, make_namespace

    server, core, batch = production, kube_admin["core"], kube_admin["batch"]
    namespace = make_namespace(core, server.home / "workspace", name="prod-mark-failed")
    name = "prod-mark-failed"

    def left() -> dict:
        return {"job": [j.metadata.name for j in batch.list_namespaced_job(namespace).items],
                "pods": [p.metadata.name for p in core.list_namespaced_pod(namespace).items],
                "service": [s.metadata.name for s in core.list_namespaced_service(namespace).items],
                "secret": [s.metadata.name for s in core.list_namespaced_secret(namespace).items
                           if s.metadata.name.startswith(name)]}

    try:
        status, body = server.api.call("POST", "/api/v2/connections", {
            "connection_id": "kubernetes_default", "conn_type": "kubernetes",
            "extra": json.dumps({"kube_config_path": str(kube_cluster.kubeconfig)})})
        assert status in (201, 409), body
        server.api.call("POST", "/api/v2/variables", {"key": "mark_failed_token", "value": "tok-mark-failed"})
        code = tmp_path / "code"
        code.mkdir()
        (code / "train.py").write_text("print('kwok plays this container')\n")
        server.trigger("training_job", {
            "job_name": name, "backend": "kubernetes", "image_uri": "training-base:latest",
            "source_dir": str(code), "entry_point": "train.py", "output_path": str(tmp_path / "models"),
            "environment": {"TOKEN": {"variable": "mark_failed_token"}},  # so the Job has a Secret to delete too
            "kubernetes": {"profile": namespace, "annotations": {PLAY + "run": "600s"}}}, run_id=name)
        ti_path = f"/api/v2/dags/training_job/dagRuns/{name}/taskInstances/launch_training"

        def waiting() -> bool:
            deferred = server.api.call("GET", ti_path)[1].get("state") == "deferred"
            running = [p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]
            return deferred and bool(running)

        wait_for("the task deferred and its pod running", waiting, timeout=240, server=server)
        # Marked failed before the triggerer has taken the trigger up (it looks every few seconds), there is no
        # trigger to cancel and Airflow calls no on_kill (docs/kubernetes.md): wait for the trigger's first line.
        trigger_logs = server.home / "logs" / "dag_id=training_job" / f"run_id={name}" / "task_id=launch_training"
        wait_for("the trigger to run in the triggerer", lambda: any(
            "[kubernetes]" in log.read_text() for log in trigger_logs.glob("attempt=1.log.trigger.*.log")),
            timeout=60, server=server)
        assert all(left().values()), left()  # Job, pod, Service and Secret are there to be deleted

        status, body = server.api.call("PATCH", ti_path, {"new_state": "failed"})
        assert status == 200, body
        marked = time.monotonic()
        try:
            wait_for("the Job, its pods, its Service and its Secret to be deleted",
                     lambda: not any(left().values()), timeout=90, server=server)
        except AssertionError as err:
            raise AssertionError(f"{err}; still there: {left()}\n{server.log_tail('triggerer')}") from None
        seconds = time.monotonic() - marked
        run = server.wait_for_run("training_job", name, timeout=120)
        ti = server.api.call("GET", ti_path)[1]
        assert run["state"] == "failed" and ti["state"] == "failed" and ti["try_number"] == 1, (run, ti)
        print(f"\nmarked failed while deferred: Job, pods, Service and Secret gone in {seconds:.1f}s")
    finally:
        core.delete_namespace(namespace)
        core.delete_persistent_volume(namespace)


def test_a_killed_worker_s_docker_training_is_reattached_not_restarted(production, tmp_path):
    from docker_support import TRAINING_IMAGE, engine, require_image

    client = engine()
    require_image(client, TRAINING_IMAGE)
    server = production
    name = "prod-docker-worker-kill"
    server.trigger("training_job", job_conf(tmp_path, name, steps=25, backend="docker", image_uri=TRAINING_IMAGE),
                   run_id=name)
    wait_for("the container's second step", lambda: "step 2" in task_log(server, name, "launch_training", 1),
             timeout=240, server=server)
    containers = client.containers(all=True, filters={"name": name})
    assert len(containers) == 1 and containers[0]["State"] == "running", containers
    _, ti = server.api.call("GET", f"/api/v2/dags/training_job/dagRuns/{name}/taskInstances/launch_training")
    task = psutil.Process(ti["pid"])  # the task process, waiting on the container
    supervisor = task.parent()
    assert psutil.Process(server.procs["scheduler"].pid) in supervisor.parents()
    for proc in (supervisor, task):
        proc.kill()

    run = server.wait_for_run("training_job", name, timeout=300)
    retry_log = task_log(server, name, "launch_training", 2)
    assert run["state"] == "success", retry_log[-4000:]
    assert f"reattaching to the containers of job {name}" in retry_log and "step 24" in retry_log
    assert_trained_once_and_uploaded(server, tmp_path, name)

"""The life of a training Job on real pods (tools/node/realnode.py) when it does not simply run to its end: the time
limit, a kill while it runs, and a retry after the worker died. Each test drives `airflow dags test training_job` (and
`airflow tasks test` for the retry) as a user or Airflow would; the cluster is the session's real one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from real_node import IMAGE
from test_kubernetes_local_cluster_dag import dags_test

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]

# One line every 0.25 s, long enough to be caught running; "step NNN" numbers them to check none is lost or repeated.
# A file `release` in the job's output data directory ends it early (the retry test, once the retry has reattached).
SLOW = """\
import os, time
release = os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "release")
for i in range(1, {steps} + 1):
    print(f"step {{i:03d}} of {steps}", flush=True)
    if os.path.exists(release):
        break
    time.sleep({pause})
"""


@pytest.fixture
def conf(tmp_path):
    def make(job_name: str, steps: int, pause: float = 0.25, **extra) -> dict:
        code = tmp_path / job_name
        code.mkdir()
        (code / "train.py").write_text(SLOW.format(steps=steps, pause=pause))
        return {"job_name": job_name, "backend": "kubernetes", "image_uri": IMAGE, "source_dir": str(code),
                "entry_point": "train.py", "output_path": str(tmp_path / "out"),
                "resources": {"cpu": "1", "memory": "256Mi"}, **extra}

    return make


def start_dags_test(conf: dict, log: Path) -> subprocess.Popen:
    """`airflow dags test training_job` in the background (its own process group), output into `log`."""
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "airflow", "dags", "test", "training_job", "--conf",
                                 json.dumps(conf)], cwd=REPO, env=os.environ.copy(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_pod_line(core, namespace: str, job: str, text: str, proc: subprocess.Popen, log: Path,
                      timeout: float = 240) -> dict:
    """Until a pod of the Job has printed `text` (read through the API server); returns {pod name: uid}."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-4000:]
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
        for pod in pods:
            if pod.status.phase == "Running":
                try:
                    if text in core.read_namespaced_pod_log(pod.metadata.name, namespace):
                        return {p.metadata.name: p.metadata.uid for p in pods}
                except Exception:  # the container is starting
                    pass
        time.sleep(0.5)
    raise AssertionError(f"no pod of Job {job} printed {text!r} within {timeout:.0f}s:\n{log.read_text()[-4000:]}")


def leftovers(admin, namespace: str, job: str) -> dict:
    """What of the job is still in the cluster: the Job, its pods, its Service, the Secret of its references."""
    batch, core = admin["batch"], admin["core"]
    return {"job": [j.metadata.name for j in batch.list_namespaced_job(namespace).items if j.metadata.name == job],
            "pods": [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items],
            "service": [s.metadata.name for s in core.list_namespaced_service(namespace).items if s.metadata.name == job],
            "secret": [s.metadata.name for s in core.list_namespaced_secret(namespace).items
                       if s.metadata.name == f"{job}-env"]}


def test_max_run_seconds_stops_the_job_with_the_time_limit_message(real_namespace, real_admin, conf):
    started = time.monotonic()
    state, states, _, output, seconds = dags_test(conf("real-deadline", steps=1200, max_run_seconds=30), timeout=400)
    assert state == "failed" and states["launch_training"] == "failed", (states, output[-4000:])
    assert "failed (timeout): the job ran longer than max_run_seconds and Kubernetes stopped it" in output, \
        output[-4000:]
    assert "step 001 of 1200" in output  # it ran before it was stopped ...
    assert "step 1200 of 1200" not in output  # ... and was stopped long before its 300 s
    deadline = time.monotonic() + 60
    while leftovers(real_admin, real_namespace, "real-deadline")["pods"]:
        pods = real_admin["core"].list_namespaced_pod(real_namespace, label_selector="job-name=real-deadline").items
        if all(p.status.phase in ("Succeeded", "Failed") for p in pods):
            break  # stopped; the Job (and its finished pods) stay until ttlSecondsAfterFinished
        assert time.monotonic() < deadline, [p.status.phase for p in pods]
        time.sleep(0.5)
    print(f"\nreal node, max_run_seconds=30: failed after {time.monotonic() - started:.1f}s (whole DAG {seconds:.1f}s)")


def test_kill_mid_run_removes_the_job_its_pods_service_and_secret(real_namespace, real_admin, conf, tmp_path,
                                                              monkeypatch):
    # The worker waits (not deferred): Airflow's task runner turns SIGTERM into the operator's on_kill, as when the
    # supervisor kills the task process of a task a user marked failed.
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DEFERRABLE", "False")
    # A secret by reference: the launcher puts it in a Secret of the job's own (real-kill-env), which must go too.
    monkeypatch.setenv("AIRFLOW_VAR_KILL_TOKEN", "token-that-must-not-outlive-the-job")
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES",
                       json.dumps({"training_job": {"variables": ["kill_token"]}}))  # allowed by the admin
    log = tmp_path / "dags-test.log"
    proc = start_dags_test(conf("real-kill", steps=1200, environment={"KILL_TOKEN": {"variable": "kill_token"}}), log)
    try:
        wait_for_pod_line(real_admin["core"], real_namespace, "real-kill", "step 005", proc, log)
        assert {k: v for k, v in leftovers(real_admin, real_namespace, "real-kill").items() if k != "pods"} == \
            {"job": ["real-kill"], "service": ["real-kill"], "secret": ["real-kill-env"]}
        killed = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while any(leftovers(real_admin, real_namespace, "real-kill").values()):
            assert time.monotonic() < deadline, leftovers(real_admin, real_namespace, "real-kill")
            time.sleep(0.2)
        gone = time.monotonic() - killed
        while "training job real-kill failed" not in log.read_text():  # the task ends with the reason
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-4000:]
            time.sleep(0.5)
    finally:
        # A user's "mark failed" sets the state first, so Airflow does not retry; a bare SIGTERM (here) leaves the
        # task up for retry, which `dags test` would wait for: end it.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    output = log.read_text()
    assert "Deleted Job" in output and "stopped by this task (killed, or stopped early)" in output, output[-4000:]
    assert "step 1200 of 1200" not in output
    print(f"\nreal node, kill mid-run: Job, pods, Service and Secret gone {gone:.1f}s after SIGTERM")


def test_a_retry_reattaches_to_the_running_job(real_namespace, real_admin, conf, tmp_path, monkeypatch):
    # The first try waits in the worker (not deferred) and the worker dies (SIGKILL: no on_kill), as a worker crash
    # the scheduler answers with a retry. The retry (`airflow tasks test` of the same run's task) defers, as usual.
    # Up to 100 s: still running when the retry's Airflow has started (load!); ended once the retry has reattached.
    job = conf("real-retry", steps=400)
    log = tmp_path / "first-try.log"
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DEFERRABLE", "False")
    proc = start_dags_test(job, log)
    monkeypatch.delenv("AIRFLOW__TRAINING_KUBERNETES__DEFERRABLE")
    try:
        before = wait_for_pod_line(real_admin["core"], real_namespace, "real-retry", "step 010", proc, log)
        job_uid = real_admin["batch"].read_namespaced_job("real-retry", real_namespace).metadata.uid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker dies: no on_kill, the Job keeps running
        proc.wait()
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run_id = session.scalars(select(DagRun.run_id).where(DagRun.dag_id == "training_job")
                                 .order_by(DagRun.id.desc())).first()
    # The DAG's Params are checked before the task runs: the same conf as the run's.
    retry_log = tmp_path / "retry.log"
    release = Path(os.environ["AIRFLOW__TRAINING__WORKSPACE"], "jobs", "real-retry", "output", "data", "release")
    with open(retry_log, "wb") as out:
        retry = subprocess.Popen([sys.executable, "-m", "airflow", "tasks", "test", "training_job", "launch_training",
                                  run_id, "--task-params", json.dumps(job)],
                                 cwd=REPO, env=os.environ.copy(), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 400
        while retry.poll() is None and "Reattaching to Job" not in retry_log.read_text(errors="replace"):
            assert time.monotonic() < deadline, retry_log.read_text(errors="replace")[-4000:]
            time.sleep(0.5)
        release.touch()  # reattached: the training need not run its whole 100 s
        retry.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if retry.poll() is None:
            retry.kill()
            retry.wait()
    output = retry_log.read_text(errors="replace")
    # Still running as a rule; on a very busy machine the retry's Airflow may start after the Job completed, and
    # the retry must then reattach to the complete Job just the same.
    assert "Reattaching to Job" in output, output[-4000:]
    steps = [line[line.index("step "):line.index("step ") + 8] for line in output.splitlines() if " of 400" in line]
    # every line the pod printed (past the first try's step 010, up to where the release ended it), each once
    assert len(steps) >= 10 and steps == [f"step {i:03d}" for i in range(1, len(steps) + 1)], \
        "a pod log line was lost or repeated"
    assert "completed on 1 host(s)" in output, output[-4000:]
    # Still the first try's Job and its one pod: no second Job was created, no pod restarted.
    assert real_admin["batch"].read_namespaced_job("real-retry", real_namespace).metadata.uid == job_uid
    pods = real_admin["core"].list_namespaced_pod(real_namespace, label_selector="job-name=real-retry").items
    assert {p.metadata.name: p.metadata.uid for p in pods} == before
    print(f"\nreal node, retry: reattached to the Job {'while running' if 'still running' in output else 'complete'}")

"""A stage's work as a step of the cluster's data plane: which backend hands it to the cluster, how the step's outcome
becomes the task's, and the step pod's entry point (operators/engine/step.py) running the stage's engine function on a
workspace and reporting through its termination message. (The steps in real pods: tests/integration/test_kubernetes_cluster_data_plane.py.)"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from operators.launch.spec import validate_spec
from operators.launch.steps import STEP_ENV, StepError, StepOutcome
from operators.lineage.code_digest import code_digest
from operators.engine import step as step_pod
from operators.stages import in_cluster
from operators.stages.stage_code import StageCodeOperator
from operators.stages.upload_artifacts import UploadArtifactsOperator


def _job(backend: str, source_dir: str, output_path: str) -> dict:
    return validate_spec({"job_name": "plane", "backend": backend, "source_dir": source_dir, "entry_point": "train.py",
                          "output_path": output_path}, default_job_name="x", default_base_job_name="x",
                         default_backend="local", default_layout="ti").to_dict()


class RecordingStep:
    """Stands in for the Kubernetes runner (operators/launch/kubernetes/steps.py, run for real on the real node): what
    the stage sent, and the outcome the pod would have reported."""

    def __init__(self, outcome: StepOutcome):
        self.outcome, self.sent = outcome, None

    def run(self, **sent):
        self.sent = sent
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__WORKSPACE", str(tmp_path / "workspace"))
    monkeypatch.setenv("AIRFLOW__TRAINING__LOCAL_ROOTS", str(tmp_path))
    return tmp_path / "workspace"


@pytest.mark.parametrize("outcome, raised", [
    (StepOutcome(skipped="nothing to upload"), AirflowSkipException),
    (StepOutcome(failed="no such bucket"), AirflowFailException),
    (StepOutcome(error="ConnectionResetError: reset"), AirflowException),
])
def test_the_steps_outcome_is_the_tasks(workspace, monkeypatch, outcome, raised):
    step = RecordingStep(outcome)
    monkeypatch.setattr(in_cluster, "_cluster_step", lambda op: step)
    op = StageCodeOperator(task_id="stage_code", job=_job("kubernetes", "s3://code/a.tar.gz", "s3://out"))
    with pytest.raises(raised, match=next(v for v in vars(outcome).values() if v)):
        op.execute({"run_id": "r1", "ti": None})
    assert not workspace.exists()  # nothing of the job's on the worker


@pytest.mark.parametrize("permanent, raised", [(True, AirflowFailException), (False, AirflowException)])
def test_a_step_that_cannot_run_fails_the_task_at_once_only_when_no_retry_helps(workspace, monkeypatch, permanent,
                                                                                 raised):
    monkeypatch.setattr(in_cluster, "_cluster_step", lambda op: RecordingStep(StepError("cannot start", permanent=permanent)))
    op = StageCodeOperator(task_id="stage_code", job=_job("kubernetes", "s3://code/a.tar.gz", "s3://out"))
    with pytest.raises(raised, match="cannot start") as caught:
        op.execute({"run_id": "r1", "ti": None})
    assert permanent or not isinstance(caught.value, AirflowFailException)


def test_a_result_becomes_the_xcom_and_the_step_gets_the_rendered_fields(workspace, monkeypatch):
    step = RecordingStep(StepOutcome(result={"files": 3}))
    monkeypatch.setattr(in_cluster, "_cluster_step", lambda op: step)
    job = _job("kubernetes", "s3://code/a.tar.gz", "s3://out")
    op = StageCodeOperator(task_id="stage_code", job=job)
    assert op.execute({"run_id": "r1"}) == {"files": 3}
    payload = step.sent["payload"]
    assert payload["stage"] == "stage_code" and payload["owner"] == op.job_owner
    assert payload["job"] == job and payload["inputs"] == {} and payload["run_id"] == "r1"
    assert step.sent["workspace"] == str(workspace)
    assert step.sent["settings_env"]["AIRFLOW__TRAINING__WORKSPACE"] == str(workspace)


def test_a_cluster_job_s_paths_are_the_clusters_whatever_this_workers_workspace(workspace, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE", "cluster")
    step = RecordingStep(StepOutcome(result={}))
    monkeypatch.setattr(in_cluster, "_cluster_step", lambda op: step)
    op = StageCodeOperator(task_id="stage_code", job=_job("kubernetes", "s3://code/a.tar.gz", "s3://out"))
    op.execute({"run_id": "r1"})
    assert op.layout.root == "/workspace/jobs/plane"  # [training.kubernetes] data_plane_workspace
    assert step.sent["workspace"] == "/workspace"
    assert step.sent["settings_env"]["AIRFLOW__TRAINING__WORKSPACE"] == "/workspace"
    assert not workspace.exists()


def test_a_backend_without_a_data_plane_of_its_own_works_here(workspace, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    result = StageCodeOperator(task_id="stage_code", job=_job("local", str(code), str(tmp_path / "out"))).execute(
        {"run_id": "r1", "dag_id": "d"})
    assert result["files"] == 1 and os.path.isfile(workspace / "jobs" / "plane" / "code" / "train.py")


class RecordedXCom:
    """The task instance's xcom_pull, over what the launch task recorded."""

    def __init__(self, recorded: dict):
        self.recorded = recorded

    def xcom_pull(self, *, task_ids, key):
        return self.recorded.get((task_ids, key))


def test_the_upload_step_gets_the_metrics_the_launch_task_recorded(workspace, monkeypatch):
    step = RecordingStep(StepOutcome(result={"status": "succeeded"}))
    monkeypatch.setattr(in_cluster, "_cluster_step", lambda op: step)
    job = _job("kubernetes", "s3://code/a.tar.gz", "s3://out")
    series = {"accuracy": [{"value": 0.5, "step": 0, "timestamp": 1.0}, {"value": "NaN", "step": 1, "timestamp": 2.0},
                           {"value": 0.9, "step": 2, "timestamp": 3.0}]}
    ti = RecordedXCom({("launch_training", "metric_series"): {"final": {"accuracy": 0.9}, "series": series}})
    op = UploadArtifactsOperator(task_id="upload_artifacts", job=job, metrics_from="launch_training")
    op.execute({"run_id": "r1", "ti": ti})
    assert step.sent["payload"]["job"] == job
    sent = step.sent["payload"]["inputs"]
    assert sent["metrics"] == {"final": {"accuracy": 0.9}, "series": {"accuracy": [  # the invalid point is dropped
        {"value": 0.5, "step": 0, "timestamp": 1.0}, {"value": 0.9, "step": 2, "timestamp": 3.0}]}}

    long = {"loss": [{"value": i / 7, "step": i, "timestamp": 1e9 + i} for i in range(20_000)]}
    ti = RecordedXCom({("launch_training", "metric_series"): {"series": long}})
    UploadArtifactsOperator(task_id="upload_artifacts", job=job, metrics_from="launch_training").execute(
        {"run_id": "r1", "ti": ti})
    sent = step.sent["payload"]["inputs"]["metrics"]
    assert len(json.dumps(sent)) <= 64 * 1024 < len(json.dumps(long))  # fits the step's environment
    assert sent["series"]["loss"][-1]["step"] == 19_999 and sent["final"] == {"loss": 19_999 / 7}

    nothing = UploadArtifactsOperator(task_id="upload_artifacts", job=job, metrics_from="launch_training")
    nothing.execute({"run_id": "r1", "ti": RecordedXCom({})})  # the launch never recorded any: none sent
    assert "metrics" not in step.sent["payload"]["inputs"]


def test_the_upload_step_gets_the_stage_results_its_lineage_is_built_from(workspace, monkeypatch):
    step = RecordingStep(StepOutcome(result={"status": "failed"}))
    monkeypatch.setattr(in_cluster, "_cluster_step", lambda op: step)
    job = _job("kubernetes", "s3://code/a.tar.gz", "s3://out")
    staged = {"code_dir": "/workspace/jobs/plane/code", "files": 1, "bytes": 9, "code_digest": "sha256:" + "c" * 64}
    failed = {"succeeded": False, "exit_code": 1, "metrics": {}, "failure_class": "UserError"}
    ti = RecordedXCom({("launch_training", "outcome"): failed})
    op = UploadArtifactsOperator(task_id="upload_artifacts", job=job, metrics_from="launch_training",
                                 stage_results={"stage_code": staged, "launch": None})
    op.execute({"run_id": "r1", "ti": ti, "dag_run": type("Run", (), {"triggering_user_name": "alice"})()})
    sent = step.sent["payload"]["inputs"]
    # a failed launch returns no XCom: its summary comes from its "outcome"
    assert sent["stage_results"] == {"stage_code": staged, "launch": failed}
    assert sent["triggering_user"] == "alice"


def _run_pod(monkeypatch, tmp_path, stage: str, task_id: str, job: dict, **inputs) -> tuple[int, dict]:
    message = tmp_path / "termination-log"
    monkeypatch.setenv("TRAINING_TERMINATION_LOG", str(message))
    monkeypatch.setenv(STEP_ENV, json.dumps({"stage": stage, "task_id": task_id, "dag_id": "training_job",
                                             "run_id": "r1", "try_number": 1, "owner": job.get("owner"), "job": job,
                                             "inputs": inputs}))
    code = step_pod.main()
    return code, json.loads(message.read_text())


def test_the_pod_runs_the_stage_here_and_reports_its_result(workspace, tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    job = _job("kubernetes", str(code), str(tmp_path / "out"))  # in the pod, the stage works where it is
    status, said = _run_pod(monkeypatch, tmp_path, "stage_code", "stage_code", job)
    staged = workspace / "jobs" / "plane" / "code"
    assert status == 0 and said == {"result": {"code_dir": str(staged), "files": 1, "bytes": 9,
                                               "code_digest": code_digest(staged).digest}}
    assert (workspace / "jobs" / "plane" / "code" / "train.py").read_text() == "print(1)\n"


def test_the_pod_process_ends_with_the_outcome_and_its_whole_log(workspace, tmp_path, monkeypatch):
    """`python -m operators.engine.step` as the pod runs it: it leaves without the interpreter's teardown, so what
    must outlive it is checked here: the exit status, the termination message and the stage's last log line."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    job = _job("kubernetes", str(code), str(tmp_path / "out"))
    message = tmp_path / "termination-log"

    def run_pod(stage: str) -> subprocess.CompletedProcess:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}  # stdout: a pipe's buffer
        env.update({"TRAINING_TERMINATION_LOG": str(message), STEP_ENV: json.dumps(
            {"stage": stage, "task_id": "stage_code", "dag_id": "training_job", "run_id": "r1",
             "try_number": 1, "owner": job.get("owner"), "job": job, "inputs": {}})})
        return subprocess.run([sys.executable, "-m", "operators.engine.step"], env=env, capture_output=True,
                              text=True, timeout=120)

    done = run_pod("stage_code")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(message.read_text())["result"]["files"] == 1
    assert f"Code from {code} staged into" in done.stdout

    broken = run_pod("no_such_stage")  # an error: its traceback is printed, not logged
    assert broken.returncode == 1 and list(json.loads(message.read_text())) == ["error"]
    assert "ValueError: no stage 'no_such_stage' runs as a step" in broken.stdout


def test_the_pod_masks_its_connections_secrets_in_its_log_and_its_outcome(workspace, tmp_path, monkeypatch, capsys):
    """The storage Secret's connections reach a step as AIRFLOW_CONN_* variables, and its log and outcome reach the
    task's log and XComs, which whoever triggers the DAG reads: once the step has read a connection (without Airflow:
    operators/storage/env_connections.py), its password appears in neither."""
    from operators import log_masking
    from operators.storage.env_connections import read_env_connection

    monkeypatch.setattr(log_masking, "_secrets", set())  # as a fresh process has it; restored after
    monkeypatch.setattr(log_masking, "_pattern", None)
    secret = "pod-storage-secret-1234"
    monkeypatch.setenv("AIRFLOW_CONN_POD_STORAGE", json.dumps({"conn_type": "aws", "login": "AKIAPOD",
                                                               "password": secret}))
    assert read_env_connection("pod_storage").password == secret  # what the stage's storage hook does first
    missing = _job("kubernetes", str(tmp_path / f"code-{secret}"), str(tmp_path / "out"))

    status, said = _run_pod(monkeypatch, tmp_path, "stage_code", "stage_code",
                            missing)
    logging.getLogger("operators.storage.hook").info("a line that names %s", secret)

    assert status == 1 and secret not in said["fail"] and "code-***" in said["fail"]
    out = capsys.readouterr().out
    assert "a line that names ***" in out and secret not in out

    # Only the secrets go: a result keyed by the job's own names, one the masker finds sensitive-looking, stays whole.
    data = tmp_path / "vocab"
    data.mkdir()
    (data / "vocab.txt").write_text("a b c\n")
    job = validate_spec({"job_name": "plane", "backend": "kubernetes", "source_dir": "s3://code/a.tar.gz",
                         "entry_point": "train.py", "output_path": str(tmp_path / "out"),
                         "inputs": {"tokenizer": str(data)}}, default_job_name="x", default_base_job_name="x",
                        default_backend="local", default_layout="ti").to_dict()
    status, said = _run_pod(monkeypatch, tmp_path, "prefetch_data",
                            "prefetch_data", job)
    assert status == 0, said
    assert said["result"]["tokenizer"]["uri"] == str(data) and "***" not in json.dumps(said)


def test_the_pod_reports_a_skip_and_a_failure(workspace, tmp_path, monkeypatch):
    job = _job("kubernetes", "s3://code/a.tar.gz", str(tmp_path / "out"))
    status, said = _run_pod(monkeypatch, tmp_path, "upload_artifacts",
                            "upload_artifacts", job)
    assert status == 0 and said == {"skip": "the job root was never created (an earlier stage failed): nothing to "
                                            "upload"}
    missing = _job("kubernetes", str(tmp_path / "nothing-here"), str(tmp_path / "out"))
    status, said = _run_pod(monkeypatch, tmp_path, "stage_code", "stage_code",
                            missing)
    assert status == 1 and list(said) == ["fail"] and "nothing-here" in said["fail"]


def test_every_stage_that_can_be_a_step_names_an_engine_function_and_no_other_goes_to_the_cluster(workspace,
                                                                                               monkeypatch):
    from operators.stages import (
        LaunchTrainingOperator, PrefetchDataOperator, RestoreOperator, StageCodeOperator, WriteConfigsOperator,
    )

    steps = [StageCodeOperator, PrefetchDataOperator, WriteConfigsOperator, RestoreOperator, UploadArtifactsOperator]
    assert sorted(op.engine_stage for op in steps) == sorted(step_pod.STAGES)
    assert LaunchTrainingOperator.engine_stage is None
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE", "cluster")
    plain = StageCodeOperator(task_id="stage_code", job=_job("kubernetes", "s3://code/a.tar.gz", "s3://out"))
    plain.engine_stage = None
    assert in_cluster._cluster_step(plain) is None


def test_the_upload_step_writes_the_metrics_it_was_given_and_uploads_them(workspace, tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    job = _job("kubernetes", str(code), str(tmp_path / "out"))
    _run_pod(monkeypatch, tmp_path, "stage_code", "stage_code", job)
    root = workspace / "jobs" / "plane"
    (root / "model").mkdir(exist_ok=True)
    (root / "model" / "weights.bin").write_text("w")
    (root / "output").mkdir(exist_ok=True)
    (root / "output" / "success").write_text("")
    (root / "output" / "metrics.json").symlink_to(tmp_path / "elsewhere.json")  # the job's: replaced, not followed
    metrics = {"final": {"accuracy": 0.9}, "series": {"accuracy": [{"value": 0.9, "step": 0, "timestamp": 1.0}]}}
    status, said = _run_pod(monkeypatch, tmp_path, "upload_artifacts",
                            "upload_artifacts", job, metrics=metrics)
    assert status == 0 and said["result"]["status"] == "succeeded", said
    uploaded = tmp_path / "out" / "plane" / "output" / "metrics.json"
    assert said["result"]["artifacts"]["metrics.json"].endswith("/plane/output/metrics.json")
    assert json.loads(uploaded.read_text()) == metrics
    assert not (tmp_path / "elsewhere.json").exists()
    # the step publishes the run's lineage too, from the results it was given
    assert said["result"]["lineage_uri"] == str(tmp_path / "out" / "plane" / "output" / "lineage.json")

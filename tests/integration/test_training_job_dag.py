"""The training_job DAG end to end: real Airflow (dag.test + metadata DB), real `train` processes, real files and the
loopback S3 server for every object-storage path."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from operators.lineage.record import LineageRecord, read_record
from operators.settings import training_settings
from dag_runner import (
    DDP_SCRIPT,
    HOSTILE_SCRIPT,
    assert_nothing_leaked,
    assert_published_without_links,
    asset_events,
    hostile_world,
    load_dag,
    model_json,
    put_code,
    run_dag,
)

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(600)]  # `dags test` may take 300 s

TI_SCRIPT = textwrap.dedent('''
    import argparse, json, os
    p = argparse.ArgumentParser(); p.add_argument("--epochs", type=int); p.add_argument("--tag")
    args = p.parse_args()
    rows = open(os.path.join(os.environ["TM_CHANNEL_TRAIN"], "rows.csv")).read().split()
    hps = json.loads(os.environ["TM_HPS"])
    for epoch in range(args.epochs):
        print(f"epoch={epoch} loss={1.0 / (epoch + 1):.3f}", flush=True)
    with open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"rows": len(rows), "hps": hps, "tag": args.tag, "cwd": os.getcwd(),
                   "host": os.environ["TM_CURRENT_HOST"]}, f)
''')


@pytest.fixture
def training_dag():  # a fresh DAG object per run: dag.test() keeps the previous run's conf in its params
    return load_dag("training_job.py", "training_job")


def test_ti_layout_single_host_from_s3(training_dag, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": TI_SCRIPT})
    object_store.put(bucket, "data/train/rows.csv", b"1\n2\n3\n")
    conf = {
        "job_name": "ti-single",
        "source_dir": f"s3://{bucket}/code/",
        "entry_point": "train.py",
        "hyperparameters": {"epochs": 3, "tag": "a b; touch PWNED"},
        "inputs": {"train": f"s3://{bucket}/data/train/"},
        "output_path": f"s3://{bucket}/models",
        "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
    }
    result = run_dag(training_dag, conf)
    state, states, values = result
    assert state == "success", states
    model_uri = f"s3://{bucket}/models/ti-single/output/model.tar.gz"
    assert values["publish_model"] == model_uri
    [event] = asset_events("training_job.model", result.run_id)
    assert event["model_uri"] == model_uri
    model = model_json(object_store, bucket, "models/ti-single/output/model.tar.gz")
    assert model["rows"] == 3 and model["tag"] == "a b; touch PWNED" and model["host"] == "algo-1"
    assert model["hps"] == {"epochs": 3, "tag": "a b; touch PWNED"}
    assert model["cwd"].endswith("/jobs/ti-single/code")
    assert values["launch_training"]["metrics"] == {"loss": pytest.approx(0.333)}
    metrics = json.loads(object_store.get(bucket, "models/ti-single/output/metrics.json"))
    assert [p["value"] for p in metrics["series"]["loss"]] == [1.0, 0.5, 0.333]
    assert "models/ti-single/output/failure" not in object_store.keys(bucket)
    # What made the model, published beside it: the code digest stage_code took and the channel's data version
    # (the cache's key of its listing), the same record the platform keeps in the job's state directory.
    lineage = LineageRecord.from_json(object_store.get(bucket, "models/ti-single/output/lineage.json"))
    assert values["upload_artifacts"]["lineage_uri"] == f"s3://{bucket}/models/ti-single/output/lineage.json"
    assert lineage.code.digest == values["stage_code"]["code_digest"] and lineage.code.digest.startswith("sha256:")
    assert lineage.channels["train"].data_version == values["prefetch_data"]["train"]["data_version"]
    assert len(lineage.channels["train"].data_version) == 64 and lineage.channels["train"].objects == 1
    assert lineage.outcome.status == "succeeded" and lineage.outcome.model_uri == model_uri
    assert lineage.hyperparameters == conf["hyperparameters"] and lineage.airflow.run_id == result.run_id
    assert (lineage.image.backend, lineage.image.name, lineage.image.digest) == ("local", None, None)  # runs no image
    assert values["launch_training"]["image_digest"] is None
    assert lineage == read_record(training_settings().workspace, "ti-single")


def test_pai_layout_with_a_command_and_cos(training_dag, storage_connections, object_store):
    bucket = object_store.bucket("cos")
    script = textwrap.dedent('''
        import argparse, json, os, sys
        p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); p.add_argument("--name")
        args = p.parse_args()
        assert os.getcwd() == os.environ["PAI_WORKING_DIR"], (os.getcwd(), os.environ["PAI_WORKING_DIR"])
        data = open(os.environ["PAI_INPUT_TRAIN"]).read()
        out = os.environ["PAI_OUTPUT_MODEL"]
        json.dump({"lr": args.lr, "name": args.name, "data": data, "hps": json.loads(os.environ["PAI_HPS"]),
                   "lr_env": os.environ["PAI_HPS_LR"]}, open(os.path.join(out, "model.json"), "w"))
        open(os.path.join(os.environ["TM_OUTPUT_DATA_DIR"], "predictions.txt"), "w").write("ok")
    ''')
    put_code(object_store, bucket, {"train.py": script})
    object_store.put(bucket, "data/single.txt", b"one object channel")
    conf = {
        "job_name": "pai-command",
        "layout": "pai",
        "source_dir": f"cos://{bucket}/code/",
        "command": "python train.py $PAI_USER_ARGS",
        "hyperparameters": {"lr": 0.01, "name": "x-y"},
        "inputs": {"train": f"cos://{bucket}/data/single.txt"},
        "output_path": f"cos://{bucket}/models",
    }
    state, states, _ = run_dag(training_dag, conf)
    assert state == "success", states
    model = model_json(object_store, bucket, "models/pai-command/output/model.tar.gz")
    assert model == {"lr": 0.01, "name": "x-y", "data": "one object channel", "hps": {"lr": 0.01, "name": "x-y"},
                     "lr_env": "0.01"}
    assert "models/pai-command/output/output.tar.gz" in object_store.keys(bucket)


def test_failing_script_fails_the_run_with_its_reason(training_dag, storage_connections, object_store, capfd):
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": "import sys\nprint('loading', flush=True)\n"
                                                "sys.exit('ValueError: column label has NaN values')\n"})
    conf = {"job_name": "failing", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "output_path": f"s3://{bucket}/models"}
    state, states, values = run_dag(training_dag, conf)
    assert state == "failed"
    assert states["launch_training"] == "failed" and states["publish_model"] == "upstream_failed"
    keys = object_store.keys(bucket, "models/failing/")
    assert "models/failing/output/model.tar.gz" not in keys
    failure = object_store.get(bucket, "models/failing/output/failure").decode()
    assert "column label has NaN values" in failure
    out = capfd.readouterr().out
    assert "training job failing failed (user_error)" in out and "column label has NaN values" in out
    assert values["upload_artifacts"]["status"] == "failed"


def test_bad_spec_fails_in_the_first_task_naming_the_field(training_dag, capfd):
    state, states, _ = run_dag(training_dag, {"source_dir": "/tmp/x", "entry_point": "train.py",
                                              "output_path": "/tmp/y", "inputs": {"bad name": "/tmp/z"}})
    assert state == "failed" and states["validate_spec"] == "failed" and states["stage_code"] == "upstream_failed"
    assert "invalid job spec: inputs.bad name: channel names may only use" in capfd.readouterr().out


def test_a_configuration_mistake_fails_the_run_at_once_without_retries_or_staging(training_dag, capfd, tmp_path,
                                                                                   monkeypatch, airflow_home):
    """Issue 10: backend kubernetes with no cluster configured used to stage everything, then fail launch_training
    with a ConfigException traceback, retried twice 5 minutes apart."""
    import os
    import time

    for name in ("AIRFLOW_CONN_KUBERNETES_DEFAULT", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    started = time.monotonic()
    state, states, _ = run_dag(training_dag, {"job_name": "no-cluster", "source_dir": str(code),
                                              "entry_point": "train.py", "output_path": str(tmp_path / "out"),
                                              "backend": "kubernetes"})
    elapsed = time.monotonic() - started
    assert state == "failed" and states["validate_spec"] == "failed" and states["stage_code"] == "upstream_failed"
    out = capfd.readouterr().out
    assert "invalid job spec: backend: is kubernetes but no cluster is configured" in out
    workspace = os.environ["AIRFLOW__TRAINING__WORKSPACE"]
    assert not os.path.exists(os.path.join(workspace, "jobs", "no-cluster"))  # nothing staged
    assert not (tmp_path / "out").exists()
    assert elapsed < 120


CKPT_SCRIPT = textwrap.dedent('''
    import json, os
    ckpt = os.path.join(os.environ["PAI_OUTPUT_CHECKPOINTS"], "step.txt")
    step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
    prev = os.path.join(os.environ["TM_CHANNEL_MODEL"], "model.json") if "TM_CHANNEL_MODEL" in os.environ else ""
    generation = json.load(open(prev))["generation"] + 1 if prev and os.path.exists(prev) else 1
    open(ckpt, "w").write(str(step + 10))
    json.dump({"step": step + 10, "generation": generation},
              open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w"))
''')


def test_resume_from_checkpoint_and_from_latest(training_dag, storage_connections, object_store, s3_proxy):
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": CKPT_SCRIPT})
    object_store.put(bucket, "ckpt/step.txt", b"5")
    conf = {"base_job_name": "nightly", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "output_path": f"s3://{bucket}/models", "checkpoint_path": f"s3://{bucket}/ckpt/",
            "resume_from": "latest"}
    state, states, values = run_dag(training_dag, conf)
    assert state == "success", states
    first = values["publish_model"]
    assert model_json(object_store, bucket, first.split(bucket + "/")[1]) == {"step": 15, "generation": 1}
    assert object_store.get(bucket, "ckpt/step.txt") == b"15"  # synced back at the end

    state, states, values = run_dag(training_dag, conf)
    assert state == "success", states
    assert values["restore"]["resumed_from"] == first
    second = values["publish_model"]
    assert second != first
    assert model_json(object_store, bucket, second.split(bucket + "/")[1]) == {"step": 25, "generation": 2}


def test_retried_upload_sends_nothing_twice(training_dag, storage_connections, object_store, s3_proxy, airflow_home):
    import os
    import subprocess
    import sys

    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": "import os\nopen(os.environ['TM_MODEL_DIR'] + '/w', 'w').write('1')\n"})
    conf = {"job_name": "retried", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "output_path": f"s3://{bucket}/models"}
    result = run_dag(training_dag, conf)
    assert result[0] == "success"
    first_etag = object_store.head(bucket, "models/retried/output/model.tar.gz")["ETag"]
    s3_proxy.reset()
    # The upload task run again for the same run, as a retry or a clear would.
    rerun = subprocess.run(
        [sys.executable, "-m", "airflow", "tasks", "test", "training_job", "upload_artifacts", result.run_id,
         "--task-params", json.dumps(conf)],
        env=os.environ.copy(), capture_output=True, text=True, timeout=300,
    )
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "already uploaded (retry): skipped" in rerun.stdout + rerun.stderr
    assert [r for r in s3_proxy.snapshot() if r["method"] in ("PUT", "POST")] == []
    assert object_store.head(bucket, "models/retried/output/model.tar.gz")["ETag"] == first_etag


@pytest.mark.slow
def test_two_host_pytorch_ddp_all_reduce(training_dag, storage_connections, object_store):
    pytest.importorskip("torch")
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": DDP_SCRIPT})
    conf = {"job_name": "ddp-2", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "instance_count": 2, "distribution": "pytorch", "output_path": f"s3://{bucket}/models",
            "metric_definitions": [{"Name": "allreduce", "Regex": "allreduce=([0-9.]+)"}], "max_run_seconds": 300}
    state, states, values = run_dag(training_dag, conf)
    assert state == "success", states
    model = model_json(object_store, bucket, "models/ddp-2/output/model.tar.gz")
    assert model == {"sum": 3.0, "world": 2, "master": "127.0.0.1", "hosts": ["algo-1", "algo-2"]}
    assert values["launch_training"]["metrics"] == {"allreduce": 3.0}


def test_a_second_run_of_a_job_name_fails_fast_and_never_overwrites_the_model(training_dag, storage_connections,
                                                                               object_store, capfd):
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": "import os\nopen(os.environ['TM_MODEL_DIR'] + '/w', 'w').write('1')\n"})
    conf = {"job_name": "once", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "output_path": f"s3://{bucket}/models"}
    first = run_dag(training_dag, conf)
    assert first[0] == "success", first[1]
    etag = object_store.head(bucket, "models/once/output/model.tar.gz")["ETag"]
    capfd.readouterr()
    second = run_dag(load_dag("training_job.py", "training_job"), conf)
    assert second[0] == "failed" and second[1]["stage_code"] == "failed"
    assert second[1]["launch_training"] == "upstream_failed"
    assert f"job once belongs to run {first.run_id} of DAG training_job" in capfd.readouterr().out
    assert object_store.head(bucket, "models/once/output/model.tar.gz")["ETag"] == etag


def test_airflow_cfg_as_a_local_input_is_refused_in_the_first_task(training_dag, airflow_home, tmp_path, capfd):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    state, states, _ = run_dag(training_dag, {"source_dir": str(tmp_path / "code"), "entry_point": "train.py",
                                              "output_path": str(tmp_path / "out"),
                                              "inputs": {"x": str(airflow_home / "airflow.cfg")}})
    assert state == "failed" and states["validate_spec"] == "failed" and states["stage_code"] == "upstream_failed"
    assert "invalid job spec: inputs.x: local path" in capfd.readouterr().out


def test_links_a_sandboxed_script_leaves_leak_nothing_and_overwrite_nothing(training_dag, storage_connections,
                                                                           object_store, capfd, caplog, tmp_path):
    """Issue 23: links to secret files and directories in model/, output/data and the checkpoints, and at the names
    the platform writes (metrics.json, its temp names) -> the model is published without them, a warning names each,
    no secret reaches an artifact, the log or XCom, and the file outside the job is unchanged."""
    world = hostile_world(tmp_path)
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": HOSTILE_SCRIPT})
    conf = {"job_name": "hostile-links", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "hyperparameters": world["hyperparameters"], "output_path": f"s3://{bucket}/models",
            "checkpoint_path": f"s3://{bucket}/ckpt/",
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    state, states, values = run_dag(training_dag, conf)
    sys.stdout.flush()
    captured = capfd.readouterr()
    log = captured.out + captured.err + caplog.text  # the task log: printed, and as records
    assert state == "success", states
    assert_published_without_links(object_store, bucket, "hostile-links", log)
    metrics = json.loads(object_store.get(bucket, "models/hostile-links/output/metrics.json"))
    assert metrics["final"] == {"loss": 0.5}
    blobs = {key: object_store.get(bucket, key) for key in object_store.keys(bucket, "models/")}
    blobs.update({key: object_store.get(bucket, key) for key in object_store.keys(bucket, "ckpt/")})
    assert_nothing_leaked(world, {**blobs, "xcom": json.dumps(values).encode(), "log": log.encode()})


def test_a_failure_file_linked_to_a_secret_never_reaches_the_failure_artifact_xcom_or_log(
        training_dag, storage_connections, object_store, capfd, caplog, tmp_path):
    world = hostile_world(tmp_path)
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": HOSTILE_SCRIPT})
    conf = {"job_name": "hostile-failure", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "hyperparameters": {**world["hyperparameters"], "fail": "yes"}, "output_path": f"s3://{bucket}/models"}
    state, states, values = run_dag(training_dag, conf)
    sys.stdout.flush()
    captured = capfd.readouterr()
    log = captured.out + captured.err + caplog.text  # the task log: printed, and as records
    assert state == "failed" and states["launch_training"] == "failed", states
    failure = object_store.get(bucket, "models/hostile-failure/output/failure").decode()
    assert "exit" in failure.lower() or "code 3" in failure, failure  # the launcher's reason took the link's place
    assert "models/hostile-failure/output/model.tar.gz" not in object_store.keys(bucket)
    blobs = {key: object_store.get(bucket, key) for key in object_store.keys(bucket, "models/")}
    assert_nothing_leaked(world, {**blobs, "xcom": json.dumps(values).encode(), "log": log.encode()})

"""Local mode (instance_type="local"): a real job on this machine through the project's runtime and local launcher,
without Airflow: the same contract (PAI variables, hyperparameters.json, channels) and the same artifacts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from training_sdk import Estimator, TrainingJobError

PAI_SCRIPT = textwrap.dedent('''
    import argparse, json, os
    p = argparse.ArgumentParser(); p.add_argument("--epochs", type=int); p.add_argument("--learning-rate", type=float)
    a = p.parse_args()
    hps = json.load(open(os.path.join(os.environ["PAI_CONFIG_DIR"], "hyperparameters.json")))
    rows = open(os.path.join(os.environ["PAI_INPUT_TRAIN"], "part-0.csv")).read().split()
    labels = open(os.environ["PAI_INPUT_LABELS"]).read().split()
    for epoch in range(a.epochs):
        print(f"epoch={epoch} loss={a.learning_rate / (epoch + 1):.4f}", flush=True)
    with open(os.path.join(os.environ["PAI_OUTPUT_MODEL"], "model.json"), "w") as f:
        json.dump({"hps": hps, "rows": rows, "labels": labels, "cwd": os.getcwd(),
                   "secret": os.environ.get("AIRFLOW__CORE__FERNET_KEY")}, f)
''')


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINING_LOCAL_WORKSPACE", str(tmp_path / "local-ws"))
    return tmp_path / "local-ws"


def make_code(tmp_path: Path, script: str) -> Path:
    code = tmp_path / "src"
    (code / "data").mkdir(parents=True)
    (code / "train.py").write_text(script)
    (code / "data" / "huge.bin").write_bytes(b"x" * 1024)  # excluded by .trainingignore
    (code / ".trainingignore").write_text("data/\n")
    return code


def test_local_fit_runs_the_runtime_with_the_pai_contract_and_writes_the_artifacts(tmp_path, workspace, capsys,
                                                                                   monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "must-not-reach-user-code")
    code = make_code(tmp_path, PAI_SCRIPT)
    train = tmp_path / "train-data"
    train.mkdir()
    (train / "part-0.csv").write_text("1,2\n3,4\n")
    labels = tmp_path / "labels.txt"
    labels.write_text("a b")
    est = Estimator(command="python train.py $PAI_USER_ARGS", source_dir=str(code), layout="pai",
                    instance_type="local", hyperparameters={"epochs": 3, "learning-rate": 0.3},
                    metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                    output_path=str(tmp_path / "models"), base_job_name="pai-local")
    job = est.fit({"train": str(train), "labels": f"file://{labels}"})

    captured = capsys.readouterr()
    assert "epoch=2 loss=0.1000" in captured.out  # the training's lines reach stdout
    assert job.status == "Completed" and job.job_name.startswith("pai-local-")
    assert "2 channel(s), 1 host(s)" in captured.err  # read from the engine's typed results
    model = est.model_data()
    assert model == str(tmp_path / "models" / job.job_name / "output" / "model.tar.gz")
    with tarfile.open(model) as tar:
        saved = json.load(tar.extractfile("model.json"))
    assert saved["hps"] == {"epochs": "3", "learning-rate": "0.3"}  # hyperparameters.json holds strings (PAI)
    assert saved["rows"] == ["1,2", "3,4"] and saved["labels"] == ["a", "b"]
    assert saved["cwd"].endswith(f"jobs/{job.job_name}/usercode")  # the PAI layout's code dir
    assert saved["secret"] is None  # the launcher strips Airflow's secrets from the user's environment
    assert not (Path(saved["cwd"]) / "data").exists()  # .trainingignore honoured
    assert [p["value"] for p in job.metrics()["loss"]] == [0.3, 0.15, 0.1]
    assert json.loads(Path(model).with_name("metrics.json").read_text())["final"] == {"loss": 0.1}


def test_local_failure_raises_with_the_reason_and_keeps_no_model(tmp_path, workspace):
    code = make_code(tmp_path, 'raise SystemExit("the learning rate must be positive")\n')
    est = Estimator(entry_point="train.py", source_dir=str(code), instance_type="local",
                    output_path=str(tmp_path / "models"))
    with pytest.raises(TrainingJobError, match="the learning rate must be positive") as err:
        est.fit()
    job = est.latest_job
    assert err.value.job_name == job.job_name and job.status == "Failed"
    assert est.model_data() is None
    assert "the learning rate must be positive" in (tmp_path / "models" / job.job_name / "output" / "failure").read_text()


def test_local_bad_spec_names_the_field_before_running(tmp_path, workspace):
    code = make_code(tmp_path, "print('never')\n")
    est = Estimator(entry_point="train.py", source_dir=str(code), instance_type="local",
                    hyperparameters={"batch-size": 1, "batch_size": 2})
    with pytest.raises(ValueError, match="hyperparameters.batch_size.*clashes"):
        est.fit()
    assert not (workspace / "jobs").exists()  # nothing was staged


def test_local_mode_never_imports_airflow(tmp_path, workspace):
    """The SDK (local mode included) runs where Airflow is not installed: importing it is made to fail."""
    code = make_code(tmp_path, "import os; open(os.path.join(os.environ['SM_MODEL_DIR'], 'm'), 'w').write('1')\n")
    program = textwrap.dedent(f'''
        import sys
        sys.modules["airflow"] = None  # any "import airflow..." now raises ImportError
        from training_sdk import Estimator
        est = Estimator(entry_point="train.py", source_dir={str(code)!r}, instance_type="local", layout="sagemaker")
        est.fit()
        print("MODEL", est.model_data())
    ''')
    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(repo / "sdk"), str(repo), str(repo / "runtime"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "TRAINING_LOCAL_WORKSPACE": str(workspace), "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MODEL " + str(workspace / "models") in done.stdout


SAGEMAKER_SCRIPT = textwrap.dedent('''
    import json, os
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"mode": os.environ.get("MODE"), "epochs": os.environ.get("EPOCHS"),
                   "world": os.environ.get("WORLD_SIZE")}, f)
''')


def test_local_fit_of_sagemaker_code_with_its_own_arguments(tmp_path, workspace):
    """SageMaker's PyTorch estimator as its docs write it, import changed and instance_type local: the role and the
    versions are ignored (one warning), the distribution object and the environment's numbers are taken."""
    import warnings

    from training_sdk.errors import IgnoredArgumentWarning

    code = make_code(tmp_path, SAGEMAKER_SCRIPT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = Estimator(entry_point="train.py", source_dir=str(code), role="arn:aws:iam::1:role/SageMakerRole",
                        framework_version="2.1", py_version="py310", instance_type="local", instance_count=1,
                        distribution={"pytorchddp": {"enabled": True}}, environment={"MODE": "fast", "EPOCHS": 3},
                        output_path=str(tmp_path / "models"), max_run=600)
    assert [w.category for w in caught] == [IgnoredArgumentWarning]
    est.fit()
    with tarfile.open(est.model_data()) as tar:
        assert json.load(tar.extractfile("model.json")) == {"mode": "fast", "epochs": "3", "world": "1"}


def test_local_mode_refuses_a_secret_reference_before_running(tmp_path, workspace):
    code = make_code(tmp_path, "print('never')\n")
    est = Estimator(entry_point="train.py", source_dir=str(code), instance_type="local",
                    environment={"WANDB_API_KEY": {"variable": "wandb_key"}})
    with pytest.raises(ValueError, match=r"^job spec field 'environment.WANDB_API_KEY': a secret reference is read "
                                         r"from Airflow, which local mode runs without"):
        est.fit()
    assert not (workspace / "jobs").exists()  # nothing was staged


LINEAGE_SCRIPT = textwrap.dedent('''
    import os
    rows = open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "part-0.csv")).read()
    print(f"rows={len(rows.split())}", flush=True)
    open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w").write(rows)
''')


def test_local_fit_publishes_the_lineage_record_of_a_dag_run(tmp_path, workspace):
    """Beside the model, as a DAG run publishes it: the digest of the code the job ran, the channel's data version (the
    data cache's key of its listing), the run that made it (DAG "local", run id the job name) and its outcome."""
    from operators.lineage.code_digest import code_digest

    code = make_code(tmp_path, LINEAGE_SCRIPT)
    train = tmp_path / "train-data"
    train.mkdir()
    (train / "part-0.csv").write_text("1,2\n3,4\n5,6\n")
    est = Estimator(entry_point="train.py", source_dir=str(code), instance_type="local", layout="sagemaker",
                    hyperparameters={"epochs": 2}, metric_definitions=[{"Name": "rows", "Regex": "rows=([0-9]+)"}],
                    output_path=str(tmp_path / "models"))
    job = est.fit({"train": str(train)})

    published = tmp_path / "models" / job.job_name / "output" / "lineage.json"
    record = json.loads(published.read_text())
    staged = workspace / "jobs" / job.job_name / "code"
    assert record["code"]["digest"] == code_digest(str(staged)).digest  # what ran, .trainingignore'd data/ not in it
    assert record["code"]["source_uri"].endswith(f"{record['code']['archive_sha256']}.tar.gz")  # the packed code
    assert sorted(p.name for p in staged.iterdir()) == [".trainingignore", "train.py"]
    channel = record["channels"]["train"]
    assert channel["uri"] == str(train) and (channel["objects"], channel["bytes"]) == (1, 12)
    # the data version is the cache entry the job read its channel from
    view = workspace / "jobs" / job.job_name / "input" / "data" / "train"
    assert view.resolve().parent == (workspace / "cache" / channel["data_version"]).resolve()
    assert record["airflow"]["dag_id"] == "local" and record["airflow"]["run_id"] == job.job_name
    assert record["hyperparameters"] == {"epochs": 2}
    assert record["outcome"] == {"status": "succeeded", "failure_class": None, "exit_code": 0,
                                 "final_metrics": {"rows": 3.0}, "model_uri": est.model_data()}
    assert record["published_uri"] == str(published) and job.lineage() == record

    # The same data again: the same data version (the cache's hit), whatever run reads it.
    again = est.fit({"train": str(train)})
    assert again.lineage()["channels"]["train"]["data_version"] == channel["data_version"]
    (train / "part-0.csv").write_text("7,8\n")
    changed = est.fit({"train": str(train)})
    assert changed.lineage()["channels"]["train"]["data_version"] != channel["data_version"]


def test_local_failure_publishes_lineage_naming_the_failure(tmp_path, workspace):
    code = make_code(tmp_path, 'raise SystemExit("bad data")\n')
    est = Estimator(entry_point="train.py", source_dir=str(code), instance_type="local",
                    output_path=str(tmp_path / "models"))
    with pytest.raises(TrainingJobError, match="bad data"):
        est.fit()
    record = json.loads((tmp_path / "models" / est.latest_job.job_name / "output" / "lineage.json").read_text())
    assert record["outcome"]["status"] == "failed" and record["outcome"]["model_uri"] is None
    assert record["code"]["digest"].startswith("sha256:")


CHECKPOINT_SCRIPT = textwrap.dedent('''
    import os
    ck = os.path.join(os.path.dirname(os.getcwd()), "checkpoints")  # the sagemaker layout's, beside code/
    path = os.path.join(ck, "step.txt")
    step = int(open(path).read()) + 1 if os.path.exists(path) else 1
    os.makedirs(ck, exist_ok=True)
    open(path, "w").write(str(step))
    print(f"step={step}", flush=True)
    open(os.path.join(os.environ["SM_MODEL_DIR"], "m"), "w").write(str(step))
''')


def test_local_fit_restores_and_syncs_checkpoint_path_as_the_dag_does(tmp_path, workspace, capsys):
    """The engine's restore and the launch's checkpoint sync: a second job with the same checkpoint_path goes on from
    the first one's checkpoint."""
    code = make_code(tmp_path, CHECKPOINT_SCRIPT)
    checkpoints = tmp_path / "checkpoints"
    est = Estimator(entry_point="train.py", source_dir=str(code), instance_type="local", layout="sagemaker",
                    checkpoint_path=str(checkpoints), output_path=str(tmp_path / "models"))
    first = est.fit()
    assert (checkpoints / "step.txt").read_text() == "1"
    second = est.fit()
    assert "step=2" in capsys.readouterr().out and (checkpoints / "step.txt").read_text() == "2"
    assert first.status == second.status == "Completed"

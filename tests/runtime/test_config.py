"""The config files as the launcher writes them and `train` reads them."""

import json
from pathlib import Path

from training_runtime.config import encode_hyperparameters, resolve_root, write_config_files
from training_runtime.layouts import layout_for

TYPED = {"epochs": 10, "lr": 0.01, "amp": True, "layers": [64, 32], "opt": {"name": "adam"}, "tag": "v1", "none": None}


def test_hyperparameters_are_stored_as_strings_and_decoded_back(make_job):
    job = make_job(hyperparameters=TYPED)
    stored = json.loads(Path(job.layout.config_file("hyperparameters.json")).read_text())
    assert stored == {
        "epochs": "10", "lr": "0.01", "amp": "true", "layers": "[64, 32]",
        "opt": '{"name": "adam"}', "tag": "v1", "none": "null",
    }
    assert job.run().returncode == 0
    env = job.seen()["env"]
    for variable in ("TM_HPS", "PAI_HPS", "SM_HPS"):
        assert json.loads(env[variable]) == TYPED, variable


def test_encode_keeps_strings_as_they_are():
    assert encode_hyperparameters({"a": "x y", "b": "10", "c": 1.5}) == {"a": "x y", "b": "10", "c": "1.5"}


def test_write_config_files_writes_only_what_it_is_given(tmp_path):
    layout = layout_for("pai", tmp_path)
    write_config_files(layout, resource_config={"hosts": ["algo-1"], "current_host": "algo-1"})
    assert sorted(p.name for p in Path(layout.config_dir).iterdir()) == ["resourceconfig.json"]


def test_typed_values_written_by_hand_are_accepted(make_job):
    job = make_job()
    Path(job.layout.config_file("hyperparameters.json")).write_text(json.dumps({"epochs": 3, "name": "x"}))
    assert job.run().returncode == 0
    seen = job.seen()
    assert seen["argv"] == ["--epochs", "3", "--name", "x"]
    assert json.loads(seen["env"]["TM_HPS"]) == {"epochs": 3, "name": "x"}


def test_plain_ti_job_root_without_trainingjobconfig(make_job):
    # A job root written by the TI / SageMaker contract alone runs too (layout ti).
    job = make_job(entry_point=None, hyperparameters={"ti_program": "train.py"})
    Path(job.layout.config_file("trainingjobconfig.json")).unlink()
    assert job.run().returncode == 0
    assert job.seen()["env"]["TRAINING_LAYOUT"] == "ti"
    assert job.seen()["env"]["TRAINING_JOB_NAME"] == job.root.name


def test_current_host_resolution_order(make_job):
    job = make_job(hosts=["algo-1", "algo-2", "algo-3"])
    # resourceconfig.json current_host
    assert job.run().returncode == 0
    assert job.seen("algo-1")["env"]["TM_CURRENT_HOST"] == "algo-1"
    # Kubernetes Indexed Job index
    assert job.run(env={"JOB_COMPLETION_INDEX": "2"}).returncode == 0
    assert job.seen("algo-3")["env"]["TM_CURRENT_HOST"] == "algo-3"
    # TRAINING_CURRENT_HOST beats the index
    assert job.run(env={"JOB_COMPLETION_INDEX": "2", "TRAINING_CURRENT_HOST": "algo-2"}).returncode == 0
    assert job.seen("algo-2")["env"]["SM_CURRENT_HOST"] == "algo-2"
    # --current-host beats everything
    result = job.run("--current-host", "algo-1", env={"TRAINING_CURRENT_HOST": "algo-3"})
    assert result.returncode == 0
    assert "host algo-1 (1 of 3)" in result.stderr


def test_root_from_training_root(make_job):
    job = make_job()
    result = job.run(env={"TRAINING_ROOT": str(job.root)}, root=False)
    assert result.returncode == 0, result.stderr
    assert job.seen()["env"]["TRAINING_ROOT"] == str(job.root)


def test_layout_flag_overrides_job_config(make_job):
    job = make_job(layout="ti")
    # The same files, read as the pai layout: code in usercode/.
    Path(job.root, "usercode").mkdir()
    Path(job.layout.code_dir, "train.py").rename(job.root / "usercode" / "train.py")
    assert job.run("--layout", "pai").returncode == 0
    assert job.seen()["env"]["PAI_OUTPUT_MODEL"] == str(job.root / "output/model") + "/"


def test_resources_from_job_config(make_job):
    job = make_job(num_gpus=4, num_cpus=8)
    assert job.run().returncode == 0
    env = job.seen()["env"]
    assert (env["TM_NUM_GPUS"], env["SM_NUM_GPUS"], env["MA_NUM_GPUS"]) == ("4", "4", "4")
    assert (env["TM_NUM_CPUS"], env["SM_NUM_CPUS"]) == ("8", "8")


def test_gpus_follow_cuda_visible_devices_when_not_configured(make_job):
    job = make_job()
    assert job.run(env={"CUDA_VISIBLE_DEVICES": "0,1"}).returncode == 0
    assert job.seen()["env"]["TM_NUM_GPUS"] == "2"


def test_root_resolution_order():
    assert resolve_root(None, {}) == "/opt/ml"
    assert resolve_root(None, {}, "pai") == "/ml"  # `train --layout pai` in a PAI-layout container
    assert resolve_root(None, {}, "modelarts") == "/home/ma-user/modelarts"
    assert resolve_root(None, {"TRAINING_ROOT": "/jobs/a"}, "pai") == "/jobs/a"
    assert resolve_root("/jobs/b", {"TRAINING_ROOT": "/jobs/a"}) == "/jobs/b"
    # sagemaker-training's own setting, below ours
    assert resolve_root(None, {"SAGEMAKER_BASE_DIR": "/sm/opt/ml"}) == "/sm/opt/ml"
    assert resolve_root(None, {"SAGEMAKER_BASE_DIR": "/sm/opt/ml", "TRAINING_ROOT": "/jobs/a"}) == "/jobs/a"

"""Scripts written for each platform run unmodified and see that platform's variables."""

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from training_runtime.layouts import LAYOUT_NAMES

TI_SCRIPT = """\
import json, os, sys
hps = json.loads(os.environ["TM_HPS"])
channels = json.loads(os.environ["TM_CHANNELS"])
with open(os.path.join(os.environ["TM_CHANNEL_TRAIN"], "data.txt")) as f:
    rows = f.read().split()
with open(os.path.join(os.environ["TM_MODEL_DIR"], "model.txt"), "w") as f:
    f.write("epochs=%d lr=%r rows=%d channels=%s" % (hps["epochs"] * 2, hps["lr"], len(rows), ",".join(channels)))
with open(os.path.join(os.environ["TM_OUTPUT_DATA_DIR"], "argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)
"""


def test_ti_script_reads_tm_variables(make_job):
    job = make_job(
        layout="ti",
        entry_point=None,  # the entry point comes from ti_program, as with the TI SDK
        hyperparameters={"ti_program": "train.py", "ti_container_log_level": "10", "epochs": 5, "lr": 0.01},
        channels=["train", "test"],
        code={"train.py": TI_SCRIPT},
        num_gpus=0,
        num_cpus=3,
    )
    Path(job.layout.channel_dir("train"), "data.txt").write_text("a\nb\nc\n")

    result = job.run()

    assert result.returncode == 0, result.stderr
    assert Path(job.root, "model/model.txt").read_text() == "epochs=10 lr=0.01 rows=3 channels=train,test"
    # Reserved ti_ keys configure the platform and never reach the script.
    assert json.loads(Path(job.layout.output_data_dir, "argv.json").read_text()) == ["--epochs", "5", "--lr", "0.01"]
    assert job.succeeded


def test_ti_variables_are_complete(make_job):
    job = make_job(
        layout="ti",
        entry_point=None,
        hyperparameters={"ti_program": "train.py", "ti_container_log_level": "10", "batch-size": "128"},
        hosts=["algo-1", "algo-2"],
        channels=["training", "test-data"],
        num_gpus=0,
        num_cpus=3,
    )
    assert job.run("--current-host", "algo-2").returncode == 0
    env = job.seen("algo-2")["env"]
    root = str(job.root)
    assert env["TM_NUM_GPUS"] == "0"
    assert env["TM_NUM_CPUS"] == "3"
    assert json.loads(env["TM_HPS"]) == {"batch-size": 128}
    assert env["TM_CURRENT_HOST"] == "algo-2"
    assert json.loads(env["TM_HOSTS"]) == ["algo-1", "algo-2"]
    assert json.loads(env["TM_CHANNELS"]) == ["training", "test-data"]
    assert env["TM_CHANNEL_TRAINING"] == root + "/input/data/training"
    assert env["TM_CHANNEL_TEST-DATA"] == root + "/input/data/test-data"  # named as ti-containers does
    assert env["TM_CHANNEL_TEST_DATA"] == root + "/input/data/test-data"  # and reachable from a shell
    assert env["TM_MODEL_DIR"] == root + "/model"
    assert env["TM_OUTPUT_DATA_DIR"] == root + "/output/data"
    assert env["TM_INPUT_CONFIG_DIR"] == root + "/input/config"
    assert env["TM_NETWORK_INTERFACE_NAME"] == "eth0"
    assert env["TM_USER_ENTRY_POINT"] == "train.py"
    assert env["TM_LOG_LEVEL"] == "10"
    assert env["TRAINING_ROOT"] == root
    assert env["TRAINING_JOB_NAME"] == "test-job"


PAI_SCRIPT = """\
import argparse, json, os
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
parser.add_argument("--batch-size", type=int)
parser.add_argument("--train.learning_rate", dest="lr", type=float)
args = parser.parse_args()
with open(os.path.join(os.environ["PAI_CONFIG_DIR"], "hyperparameters.json")) as f:
    stored = json.load(f)
train_rows = open(os.path.join(os.environ["PAI_INPUT_TRAIN"], "part-0.csv")).read().count("\\n")
test_rows = open(os.environ["PAI_INPUT_TEST"]).read().count("\\n")
with open(os.path.join(os.environ["PAI_OUTPUT_MODEL"], "model.json"), "w") as f:
    json.dump({
        "args": [args.epochs, args.batch_size, args.lr],
        "stored": stored,
        "hps": json.loads(os.environ["PAI_HPS"]),
        "batch": os.environ["PAI_HPS_BATCH_SIZE"],
        "lr": os.environ["PAI_HPS_TRAIN_LEARNING_RATE"],
        "rows": [train_rows, test_rows],
        "cwd": os.getcwd(),
    }, f)
"""


def test_pai_command_with_user_args_reads_pai_variables(make_job):
    job = make_job(
        layout="pai",
        entry_point=None,
        command="python train.py $PAI_USER_ARGS",
        hyperparameters={"epochs": 10, "batch-size": 32, "train.learning_rate": 0.001},
        channels=["train", "test"],
        channel_files={"test": "test.csv"},  # a single-object channel
        code={"train.py": PAI_SCRIPT},
    )
    Path(job.layout.channel_dir("train"), "part-0.csv").write_text("1\n2\n")
    Path(job.layout.channel_dir("test"), "test.csv").write_text("3\n")

    result = job.run()

    assert result.returncode == 0, result.stderr
    model = json.loads(Path(job.root, "output/model/model.json").read_text())
    assert model["args"] == [10, 32, 0.001]
    # hyperparameters.json holds strings, PAI_HPS the typed values.
    assert model["stored"] == {"epochs": "10", "batch-size": "32", "train.learning_rate": "0.001"}
    assert model["hps"] == {"epochs": 10, "batch-size": 32, "train.learning_rate": 0.001}
    assert model["batch"] == "32"
    assert model["lr"] == "0.001"
    assert model["rows"] == [2, 1]
    assert model["cwd"] == str(job.root / "usercode")


def test_pai_variables_are_complete(make_job):
    job = make_job(
        layout="pai",
        hyperparameters={"epochs": 10, "batch-size": 32, "learning-rate": 0.001},
        channels=["train", "test"],
        channel_files={"test": "test.csv"},
    )
    assert job.run().returncode == 0
    env = job.seen()["env"]
    root = str(job.root)
    assert env["PAI_USER_ARGS"] == "--epochs 10 --batch-size 32 --learning-rate 0.001"
    assert json.loads(env["PAI_HPS"]) == {"epochs": 10, "batch-size": 32, "learning-rate": 0.001}
    assert env["PAI_HPS_EPOCHS"] == "10"
    assert env["PAI_HPS_BATCH_SIZE"] == "32"
    assert env["PAI_HPS_LEARNING_RATE"] == "0.001"
    assert env["PAI_INPUT_TRAIN"] == root + "/input/data/train/"
    assert env["PAI_INPUT_TEST"] == root + "/input/data/test/test.csv"
    assert env["PAI_OUTPUT_MODEL"] == root + "/output/model/"
    assert env["PAI_OUTPUT_CHECKPOINTS"] == root + "/output/checkpoints/"
    assert env["PAI_CONFIG_DIR"] == root + "/input/config/"
    assert env["PAI_WORKING_DIR"] == root + "/usercode"


SAGEMAKER_SCRIPT = """\
import argparse, json, os
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=1)
parser.add_argument("--model-dir", default=os.environ["SM_MODEL_DIR"])
parser.add_argument("--train", default=os.environ["SM_CHANNEL_TRAIN"])
parser.add_argument("--hosts", type=json.loads, default=os.environ["SM_HOSTS"])
args = parser.parse_args()
rows = open(os.path.join(args.train, "rows.txt")).read().split()
with open(os.path.join(args.model_dir, "model.json"), "w") as f:
    json.dump({"epochs": args.epochs, "batch": args.batch_size, "rows": len(rows), "hosts": args.hosts}, f)
"""


def test_sagemaker_argparse_script_reads_sm_variables(make_job):
    job = make_job(
        layout="sagemaker",
        entry_point=None,
        # The SageMaker SDK JSON-encodes every value, strings included.
        hyperparameters={
            "sagemaker_program": '"train.py"', "sagemaker_region": '"eu-west-1"', "epochs": 3, "batch-size": 64,
        },
        code={"train.py": SAGEMAKER_SCRIPT},
    )
    Path(job.layout.channel_dir("train"), "rows.txt").write_text("x y z")

    result = job.run()

    assert result.returncode == 0, result.stderr
    model = json.loads(Path(job.root, "model/model.json").read_text())
    assert model == {"epochs": 3, "batch": 64, "rows": 3, "hosts": ["algo-1"]}


def test_sagemaker_variables_are_complete(make_job):
    job = make_job(
        layout="sagemaker",
        entry_point=None,
        hyperparameters={"sagemaker_program": '"train.py"', "epochs": 3, "batch-size": 64, "opt": {"lr": 0.1}},
        channels=["train", "eval"],
        num_cpus=2,
        num_gpus=0,
    )
    assert job.run().returncode == 0
    env = job.seen()["env"]
    root = str(job.root)
    assert env["SM_MODEL_DIR"] == root + "/model"
    assert json.loads(env["SM_CHANNELS"]) == ["eval", "train"]
    assert env["SM_CHANNEL_TRAIN"] == root + "/input/data/train"
    assert env["SM_CHANNEL_EVAL"] == root + "/input/data/eval"
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "batch-size": 64, "opt": {"lr": 0.1}}
    assert env["SM_HP_EPOCHS"] == "3"
    assert env["SM_HP_BATCH-SIZE"] == "64"  # sagemaker-training's own name
    assert env["SM_HP_BATCH_SIZE"] == "64"
    assert json.loads(env["SM_HP_OPT"]) == {"lr": 0.1}
    assert env["SM_CURRENT_HOST"] == "algo-1"
    assert json.loads(env["SM_HOSTS"]) == ["algo-1"]
    assert env["SM_NUM_GPUS"] == "0"
    assert env["SM_NUM_CPUS"] == "2"
    assert env["SM_OUTPUT_DATA_DIR"] == root + "/output/data"
    assert env["SM_INPUT_CONFIG_DIR"] == root + "/input/config"
    assert env["SM_USER_ENTRY_POINT"] == "train.py"
    # sagemaker-training's form: sorted by name, an object as k=v pairs.
    assert json.loads(env["SM_USER_ARGS"]) == ["--batch-size", "64", "--epochs", "3", "--opt", "lr=0.1"]
    assert json.loads(env["SM_USER_ARGS"]) == job.seen()["argv"]
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert training_env["channel_input_dirs"] == {
        "train": root + "/input/data/train", "eval": root + "/input/data/eval",
    }
    assert training_env["hyperparameters"]["epochs"] == 3
    assert training_env["is_master"] is True
    # Reserved sagemaker_ keys are not hyperparameters; the toolkit's own settings
    # (sagemaker_program, ...) are not framework parameters either.
    assert "sagemaker_program" not in json.loads(env["SM_HPS"])
    assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {}


MODELARTS_SCRIPT = """\
import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--data_url")
parser.add_argument("--train_url")
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
rows = open(os.path.join(args.data_url, "rows.txt")).read().split()
with open(os.path.join(args.train_url, "model.json"), "w") as f:
    json.dump({"rows": len(rows), "epochs": args.epochs, "cwd": os.getcwd(), "argv": sys.argv[1:],
               "pythonpath": os.environ["PYTHONPATH"].split(os.pathsep)[0]}, f)
"""


def test_modelarts_layout_passes_data_url_and_train_url(make_job):
    job = make_job(
        layout="modelarts",
        hyperparameters={"epochs": 2},
        channels=["data_url_0", "eval"],
        code={"train.py": MODELARTS_SCRIPT},
        host_addresses={"algo-1": "10.0.0.7"},
        num_gpus=0,
    )
    Path(job.layout.channel_dir("data_url_0"), "rows.txt").write_text("a b c d")

    result = job.run()

    assert result.returncode == 0, result.stderr
    root = str(job.root)
    model = json.loads(Path(root, "output/model/model.json").read_text())
    assert model["rows"] == 4
    assert model["epochs"] == 2
    assert model["cwd"] == root + "/user-job-dir/code"
    assert model["argv"] == [
        "--data_url=%s/input/data/data_url_0/" % root,
        "--train_url=%s/output/model/" % root,
        "--epochs", "2",
    ]
    assert model["pythonpath"] == root + "/user-job-dir"


def test_modelarts_variables_are_complete(make_job):
    job = make_job(layout="modelarts", hosts=["algo-1", "algo-2", "algo-3"],
                   host_addresses={"algo-2": "10.0.0.8"}, num_gpus=0)
    assert job.run("--current-host", "algo-2").returncode == 0
    env = job.seen("algo-2")["env"]
    assert env["MA_JOB_DIR"] == str(job.root / "user-job-dir")
    assert env["MA_NUM_HOSTS"] == "3"
    assert env["MA_CURRENT_HOST"] == "algo-2"
    assert env["MA_CURRENT_IP"] == "10.0.0.8"
    assert env["MA_NUM_GPUS"] == "0"
    assert env["VC_TASK_INDEX"] == "1"


def test_modelarts_command_gets_no_implicit_arguments(make_job):
    job = make_job(layout="modelarts", entry_point=None, command="python train.py", hyperparameters={"epochs": 2})
    assert job.run().returncode == 0
    assert job.seen()["argv"] == []


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_every_family_points_into_the_actual_layout_root(make_job, layout):
    job = make_job(layout=layout, hyperparameters={"epochs": 1}, channels=["train"], num_gpus=0)
    assert job.run().returncode == 0
    seen = job.seen()
    env, lay = seen["env"], job.layout
    assert seen["cwd"] == lay.code_dir
    assert env["TM_MODEL_DIR"] == env["SM_MODEL_DIR"] == env["PAI_OUTPUT_MODEL"].rstrip("/") == lay.model_dir
    train_dir = lay.channel_dir("train")
    assert env["TM_CHANNEL_TRAIN"] == env["SM_CHANNEL_TRAIN"] == env["PAI_INPUT_TRAIN"].rstrip("/") == train_dir
    config_dir = lay.config_dir
    assert env["TM_INPUT_CONFIG_DIR"] == env["SM_INPUT_CONFIG_DIR"] == env["PAI_CONFIG_DIR"].rstrip("/") == config_dir
    assert env["TM_OUTPUT_DATA_DIR"] == env["SM_OUTPUT_DATA_DIR"] == lay.output_data_dir
    assert env["PAI_OUTPUT_CHECKPOINTS"].rstrip("/") == lay.checkpoint_dir
    assert env["PAI_WORKING_DIR"] == env["SM_MODULE_DIR"] == lay.code_dir
    assert env["MA_JOB_DIR"] == os.path.dirname(lay.code_dir)
    assert env["TRAINING_LAYOUT"] == layout
    for name, value in env.items():
        if name.startswith(("TM_", "SM_", "PAI_", "MA_")) and value.startswith("/"):
            assert value.startswith(str(job.root)), (name, value)


def test_pai_user_args_split_back_into_the_entry_point_arguments(make_job):
    hyperparameters = {"name": "a b; touch PWNED $(id)", "quote": "it's \"x\"", "flag": "", "n": 3}
    job = make_job(hyperparameters=hyperparameters)
    assert job.run().returncode == 0
    seen = job.seen()
    assert shlex.split(seen["env"]["PAI_USER_ARGS"]) == seen["argv"]
    assert seen["argv"] == ["--name", "a b; touch PWNED $(id)", "--quote", "it's \"x\"", "--flag", "--n", "3"]


def test_path_is_left_alone_when_python_on_it_is_the_jobs(make_job):
    # As in an image: ti-containers and sagemaker-training never touch PATH, and neither do we
    # when `python` on PATH already is the job's Python.
    python_dir = os.path.realpath(os.path.dirname(sys.executable))  # (.venv may be a link)
    path = python_dir + os.pathsep + os.environ.get("PATH", "")
    job = make_job()
    assert job.run(env={"PATH": path}).returncode == 0
    assert job.seen()["env"]["PATH"] == path


def test_path_gets_the_jobs_python_first_otherwise(make_job):
    job = make_job(entry_point=None, command="python train.py")
    path = "/usr/bin:/bin"
    assert job.run(env={"PATH": path}).returncode == 0
    assert job.seen()["env"]["PATH"].split(os.pathsep)[1:] == path.split(os.pathsep)


def test_sagemaker_hosts_sharing_one_root_each_see_themselves(make_job):
    # Local mode: one resourceconfig.json (current_host algo-1) for both hosts.
    job = make_job(layout="sagemaker", hosts=["algo-1", "algo-2"])
    assert job.run("--current-host", "algo-2").returncode == 0
    env = job.seen("algo-2")["env"]
    assert env["SM_CURRENT_HOST"] == env["CURRENT_HOST"] == "algo-2"
    assert json.loads(env["SM_RESOURCE_CONFIG"])["current_host"] == "algo-2"
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert (training_env["is_master"], training_env["master_hostname"]) == (False, "algo-1")

"""Submit code written for SageMaker's or PAI's SDK, with only its import changed: what their docs' examples write is
taken onto the job spec, ignored with one warning, or refused in one line naming what to use instead. A spec the
Estimator builds is checked against the training_job DAG's own Params (as the REST API serves them), and fit() is
followed up to the trigger with a session that records it."""

from __future__ import annotations

import json
import runpy
import warnings
from pathlib import Path

import pytest

from training_sdk import Estimator, TrainingSdkError
from training_sdk.errors import IgnoredArgumentWarning

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def params():
    dag = runpy.run_path(str(REPO / "dags" / "training_job.py"))["dag"]
    return json.loads(json.dumps({name: dag.params.get_param(name).dump() for name in dag.params}, default=str))


class RecordingSession:
    """What fit() asks of the Airflow API: the DAG's Params, then one trigger, recorded."""

    api_url = "http://airflow.invalid"

    def __init__(self, params):
        self.params = params
        self.triggered = []

    def dag_params(self, dag_id):
        return self.params

    def trigger(self, dag_id, run_id, conf):
        self.triggered.append(conf)


def submitted(est: Estimator, params, inputs) -> dict:
    session = RecordingSession(params)
    est._session = session
    est.fit(inputs, wait=False)
    (conf,) = session.triggered
    return conf


def sagemaker_estimator(**extra):
    """SageMaker's PyTorch estimator as its docs write it (code already in S3, so nothing is uploaded)."""
    return Estimator(entry_point="train.py", source_dir="s3://bucket/code/sourcedir.tar.gz",
                     role="arn:aws:iam::111122223333:role/SageMakerRole", framework_version="2.1", py_version="py310",
                     instance_count=1, instance_type="ml.p3.2xlarge", output_path="s3://bucket/models",
                     hyperparameters={"epochs": 10}, **extra)


def test_sagemaker_role_session_and_versions_are_ignored_with_one_warning(params):
    with pytest.warns(IgnoredArgumentWarning) as caught:
        est = sagemaker_estimator(sagemaker_session=object())
    assert len(caught) == 1
    message = str(caught[0].message)
    for name in ("role", "sagemaker_session", "framework_version", "py_version", "instance_type='ml.p3.2xlarge'"):
        assert name in message
    assert "resources=" in message  # what to give for a machine's size
    conf = submitted(est, params, {"train": "s3://bucket/train/"})
    assert not {"role", "sagemaker_session", "framework_version", "py_version", "instance_type"} & set(conf)
    assert conf["hyperparameters"] == {"epochs": 10} and conf["output_path"] == "s3://bucket/models"
    unknown = Estimator(entry_point="train.py", source_dir="s3://b/code/", output_path="s3://b/models", epochs=3)
    with pytest.raises(TrainingSdkError, match="'epochs': is not a parameter of DAG training_job"):
        submitted(unknown, params, {})  # what neither SDK knows is still the DAG's to name


def test_an_argument_set_to_none_or_false_asks_nothing_and_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = Estimator(entry_point="train.py", role=None, use_spot_instances=False, enable_network_isolation=False,
                        disable_profiler=True, volume_kms_key=None, instance_type="local")
    assert est.spec_extra == {}


def test_environment_values_pass_as_given_so_a_secret_reference_reaches_the_dag(params):
    env = {"WANDB_API_KEY": {"variable": "wandb_key"}, "DB_PASSWORD": {"connection": "warehouse", "field": "password"},
           "EPOCHS": 3, "DEBUG": True, "MODE": "fast"}
    est = Estimator(entry_point="train.py", source_dir="s3://b/code/", output_path="s3://b/models", environment=env)
    assert submitted(est, params, {})["environment"] == env


def test_pai_environments_requirements_labels_and_command_list(params):
    est = Estimator(command=["python", "train.py", "$PAI_USER_ARGS"], source_dir="oss://b/code/", layout="pai",
                    environments={"MODE": "fast"}, labels={"team": "churn"}, max_run_time=600,
                    checkpoints_path="oss://b/ckpt/", output_path="oss://b/models", job_type="PyTorchJob",
                    base_job_name="example_train_job")
    conf = submitted(est, params, {"train": "oss://b/train/"})
    assert conf["command"] == "python train.py $PAI_USER_ARGS"
    assert conf["environment"] == {"MODE": "fast"} and conf["tags"] == {"team": "churn"}
    assert conf["max_run_seconds"] == 600 and conf["checkpoint_path"] == "oss://b/ckpt/"
    assert conf["distribution"] == "pytorch"
    assert conf["base_job_name"] == "example-train-job" and conf["job_name"].startswith("example-train-job-")
    with pytest.raises(TrainingSdkError, match=r"^Estimator argument requirements=\['numpy'\] has no equivalent "
                                               r"here: list the packages in source_dir/requirements.txt"):
        Estimator(command="python train.py", requirements=["numpy"])


def test_sagemaker_tags_distribution_checkpoints_and_input_mode_map_onto_the_spec(params):
    with pytest.warns(IgnoredArgumentWarning):
        est = sagemaker_estimator(tags=[{"Key": "team", "Value": "churn"}], max_run=3600, volume_size=100,
                                  use_spot_instances=True, max_wait=7200, checkpoint_s3_uri="s3://bucket/ckpt/",
                                  checkpoint_local_path="/opt/ml/checkpoints", input_mode="File",
                                  distribution={"pytorchddp": {"enabled": True}}, base_job_name="MyTraining")
    conf = submitted(est, params, {"train": "s3://bucket/train/"})
    assert conf["tags"] == {"team": "churn"} and conf["max_run_seconds"] == 3600
    assert conf["checkpoint_path"] == "s3://bucket/ckpt/" and conf["distribution"] == "pytorch"
    assert conf["base_job_name"] == "mytraining"
    with pytest.warns(IgnoredArgumentWarning):
        mpi = sagemaker_estimator(distribution={"mpi": {"enabled": True, "processes_per_host": 4}})
    assert mpi.job_spec()["distribution"] == "mpi" and mpi.job_spec()["processes_per_host"] == 4
    with pytest.warns(IgnoredArgumentWarning):
        torchrun = sagemaker_estimator(distribution={"torch_distributed": {"enabled": True}})
    assert torchrun.job_spec()["distribution"] == {"torch_distributed": {"enabled": True}}


@pytest.mark.parametrize("argument, value, instead", [
    ("enable_network_isolation", True, "isolation is the admin's setting"),
    ("output_kms_key", "arn:aws:kms:key", "the bucket's setting"),
    ("git_config", {"repo": "https://github.com/o/r.git"}, "clone the repository"),
    ("dependencies", ["lib/"], "copy them into source_dir"),
    ("model_uri", "s3://b/model.tar.gz", "use resume_from="),
    ("input_mode", "Pipe", "read them from $SM_CHANNEL_<NAME>"),
    ("checkpoint_local_path", "/tmp/ckpt", "write them there"),
    ("distribution", {"smdistributed": {"dataparallel": {"enabled": True}}}, "torch_distributed"),
    ("job_type", "XGBoostJob", "give distribution (mpi, pytorch, tensorflow)"),
])
def test_what_cannot_be_honoured_is_one_line_naming_the_argument_and_what_to_do(argument, value, instead):
    with pytest.raises(TrainingSdkError) as err:
        Estimator(entry_point="train.py", **{argument: value})
    message = str(err.value)
    assert message.startswith(f"Estimator argument {argument}={value!r} has no equivalent here: ")
    assert instead in message and "\n" not in message


def test_sagemaker_fit_with_one_uri_is_its_training_channel_and_logs_none_streams_nothing(params):
    with pytest.warns(IgnoredArgumentWarning):
        est = sagemaker_estimator()
    session = RecordingSession(params)
    est._session = session
    waited = []
    est.fit("s3://bucket/train/", wait=False)
    assert session.triggered[0]["inputs"] == {"training": "s3://bucket/train/"}
    est._submit = lambda spec, dag_id: type("Job", (), {"wait": lambda self, logs: waited.append(logs)})()
    est.fit("s3://bucket/train/", logs="None")
    est.fit("s3://bucket/train/", logs="All")
    assert waited == [False, True]

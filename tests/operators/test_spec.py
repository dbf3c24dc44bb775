import pytest

from operators.spec import JobSpec, SpecError, job_name_from, validate_spec

BASE = {"job_name": "churn-1", "source_dir": "s3://bucket/code/", "output_path": "s3://bucket/models",
        "entry_point": "train.py"}


def test_valid_spec_round_trips_through_xcom_dict():
    spec = validate_spec({**BASE, "hyperparameters": {"lr": 0.1, "epochs": 3}, "inputs": {"train": "cos://b/d/"}})
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.job_output_uri == "s3://bucket/models/churn-1/output/"
    assert spec.layout == "ti" and spec.backend == "local" and spec.instance_count == 1


def test_defaults_come_from_settings_and_the_run():
    spec = validate_spec({k: v for k, v in BASE.items() if k != "job_name"}, default_job_name="nightly-20261121",
                         default_backend="kubernetes", default_layout="pai")
    assert (spec.job_name, spec.backend, spec.layout) == ("nightly-20261121", "kubernetes", "pai")


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"job_name": "Bad_Name"}, "job_name", "DNS-1123"),
        ({"source_dir": None}, "source_dir", "required"),
        ({"source_dir": "ftp://x/y"}, "source_dir", "unsupported scheme"),
        ({"output_path": "s3:///models"}, "output_path", "names no bucket"),
        ({"entry_point": None}, "entry_point", "required"),
        ({"entry_point": "../evil.py"}, "entry_point", "relative path"),
        ({"entry_point": "train.rb"}, "entry_point", ".py or .sh"),
        ({"command": "python x.py"}, "command", "not both"),
        ({"hyperparameters": {"batch-size": 1, "batch_size": 2}}, "hyperparameters.batch_size", "clashes"),
        ({"hyperparameters": {"x": [1, 2]}}, "hyperparameters.x", "scalars"),
        ({"inputs": {"bad/name": "s3://b/x/"}}, "inputs.bad/name", "channel names"),
        ({"inputs": {"train": "s3://b/../x/"}}, "inputs.train", "'..'"),
        ({"instance_count": 0}, "instance_count", ">= 1"),
        ({"layout": "azure"}, "layout", "not one of"),
        ({"backend": "slurm"}, "backend", "not one of"),
        ({"resume_from": "s3://b/model.zip"}, "resume_from", "model.tar.gz"),
        ({"resources": {"memory": "lots"}}, "resources.memory", "memory quantity"),
        ({"metric_definitions": [{"Name": "loss", "Regex": "loss=[0-9.]+"}]}, "metric_definitions[0]", "capture"),
        ({"connections": {"gcs": "x"}}, "connections.gcs", "schemes"),
        ({"learning_rate": 0.1}, "learning_rate", "not a job spec field"),
    ],
)
def test_bad_spec_names_the_field(change, field, words):
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, **change})
    assert err.value.field == field
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_job_names_from_runs_are_valid_and_stable():
    name = job_name_from("training_job", "manual__2026-11-21T13:45:00.123456+00:00")
    assert name == job_name_from("training_job", "manual__2026-11-21T13:45:00.123456+00:00")
    long = job_name_from("x" * 80, "suffix")
    assert len(long) <= 63 and long != job_name_from("x" * 81, "suffix")
    for n in (name, long):
        validate_spec({**BASE, "job_name": n})

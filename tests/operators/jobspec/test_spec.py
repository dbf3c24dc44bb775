import pytest

from operators.jobspec.model import JobSpec, SpecError, job_name_from
from operators.launch.spec import validate_spec

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
        ({"metric_definitions": [{"Name": "loss", "Regex": "loss=[0-9.]+"}]}, "metric_definitions[0].Regex", "capture"),
        # what only a backtracking engine does: the worker matches with RE2 (linear time)
        ({"metric_definitions": [{"Name": "l", "Regex": "(?<=loss=)([0-9.]+)"}]}, "metric_definitions[0].Regex",
         "RE2 cannot compile it"),
        ({"metric_definitions": [{"Name": "a", "Regex": "a=(\\d)"}, {"Name": "b", "Regex": "(b)=\\1"}]},
         "metric_definitions[1].Regex", "RE2 cannot compile it"),
        ({"metric_definitions": [{"Name": "l", "Regex": "([\\pL\\pN]{1,200}\\s+\\pL{1,200}z)"}]},
         "metric_definitions[0].Regex", "too large for the metric engine"),
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


# ---- the pydantic model: the mistakes of issue 10 and more a user makes ------------------------------------------


@pytest.mark.parametrize(
    "change, field, words",
    [
        # from the issue
        ({"kubernetes": {"namspace": "ml"}}, "kubernetes.namspace", "is not a field of kubernetes; did you mean "
                                                                     "'namespace'?"),
        ({"resources": {"gpu": -1}}, "resources.gpu", "must be >= 0, got -1"),
        ({"hyperparameters": {"blob": "x" * (1024 * 1024)}}, "hyperparameters.blob", "limited to 16384 bytes"),
        # bad types
        ({"instance_count": "two"}, "instance_count", "must be an integer, got \"two\""),
        ({"instance_count": True}, "instance_count", "must be an integer, got true"),
        ({"hyperparameters": "lr=0.1"}, "hyperparameters", "must be an object"),
        ({"metric_definitions": "loss=([0-9.]+)"}, "metric_definitions", "must be a list"),
        ({"inputs": {"train": 5}}, "inputs.train", "must be a string"),
        ({"kubernetes": {"node_selector": {"pool": 1}}}, "kubernetes.node_selector.pool", "must be a string"),
        ({"docker": {"keep_containers": "maybe"}}, "docker.keep_containers", "must be true or false"),
        # unknown keys at every level
        ({"resources": {"disks": "10Gi"}}, "resources.disks", "is not a field of resources"),
        ({"resources": {"disk": "lots"}}, "resources.disk", "not a disk quantity"),
        ({"docker": {"shm": "2Gi"}}, "docker.shm", "is not a field of docker"),
        ({"metric_definitions": [{"Name": "loss", "Regex": "l=(.*)", "Type": "max"}]}, "metric_definitions[0].Type",
         "is not a field of metric_definitions[0]"),
        # values out of range and enums
        ({"max_run_seconds": 10**9}, "max_run_seconds", "must be <= 2419200"),
        ({"kubernetes": {"image_pull_policy": "Sometimes"}}, "kubernetes.image_pull_policy", "is not one of"),
        ({"distribution": "horovod"}, "distribution", "is not one of"),
        ({"resources": {"cpu": "-1"}}, "resources.cpu", "not a CPU quantity"),
        ({"resources": {"memory": "0"}}, "resources.memory", "must be > 0"),
        ({"environment": {"1BAD": "x"}}, "environment.1BAD", "shell variable names"),
        ({"environment": {"X": [1]}}, "environment.X", "scalars"),
        ({"connections": {"s3": ""}}, "connections.s3", "names no connection"),
        # cross-field rules
        ({"processes_per_host": 4}, "processes_per_host", "need distribution pytorch or mpi"),
        ({"processes_per_host": 2, "distribution": "tensorflow"}, "processes_per_host", "need distribution"),
        ({"inputs": {"model": "s3://b/m/"}, "resume_from": "latest"}, "inputs.model", "reserved"),
        ({"hyperparameters": {f"p{i}": "v" * 8000 for i in range(10)}}, "hyperparameters", "at most 65536"),
    ],
)
def test_model_errors_name_the_field_in_one_line(change, field, words):
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, **change})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert words in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_the_issue_example_reads_as_one_line():
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, "resources": {"gpu": -1}})
    assert str(err.value) == "resources.gpu: must be >= 0, got -1"


def test_nested_sections_round_trip_and_each_backend_gets_its_own_options():
    raw = {**BASE, "backend": "kubernetes", "resources": {"cpu": 2, "memory": "4Gi", "gpu": 1},
           "kubernetes": {"namespace": "ml", "secret_env": {"HF_TOKEN": "hf/token"}},
           "docker": {"shm_size": "2Gi"}, "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    spec = validate_spec(raw)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.backend_options() == {"namespace": "ml", "secret_env": {"HF_TOKEN": "hf/token"}}
    assert spec.ignored_sections() == ["docker"]
    assert spec.resources.model_dump(exclude_none=True) == {"cpu": "2", "memory": "4Gi", "gpu": 1}
    local = validate_spec({**BASE})
    assert local.backend_options() == {} and local.ignored_sections() == []


def test_a_validated_spec_of_an_earlier_release_gives_its_launcher_only_the_options_it_set():
    # Its XCom listed every option of a section, an unset one as null; a launcher reads null as a value.
    earlier = {**validate_spec({**BASE, "backend": "docker"}).to_dict(),
               "docker": {"user": None, "shm_size": "2Gi", "keep_containers": False, "poll_interval": None}}
    assert JobSpec.from_dict(earlier).backend_options() == {"shm_size": "2Gi", "keep_containers": False}


def test_a_raw_spec_validated_without_the_backends_models_is_a_caller_s_bug_not_a_pass():
    # The spec model cannot check a backend's section itself (the models are the backends', above it): validating a
    # raw spec without them would let `kubernetes.namspace` through, so it is refused loudly.
    with pytest.raises(TypeError, match="operators.launch.spec.validate_spec"):
        JobSpec.model_validate({**BASE, "backend": "kubernetes", "kubernetes": {"namspace": "ml"}})


def test_enums_are_the_runtimes():
    from training_runtime.config import DISTRIBUTIONS
    from training_runtime.layouts import CONTAINER_ROOTS

    from operators.jobspec.model import DISTRIBUTIONS as SPEC_DISTRIBUTIONS
    from operators.jobspec.model import LAYOUTS

    assert set(LAYOUTS) == set(CONTAINER_ROOTS) and set(SPEC_DISTRIBUTIONS) == set(DISTRIBUTIONS)


def test_literal_credentials_are_refused_with_the_reference_form_on_every_backend():
    for backend in ("local", "docker", "kubernetes"):
        for name, value in (("AWS_SECRET_ACCESS_KEY", "abc"), ("DB_URL", "postgres://u:pw@db/x")):
            with pytest.raises(SpecError) as err:
                validate_spec({**BASE, "backend": backend, "environment": {name: value}})
            assert err.value.field == f"environment.{name}"
            assert '{"variable": "<Airflow Variable key>"}' in str(err.value) and value not in str(err.value)


def test_references_travel_as_references():
    spec = validate_spec({**BASE, "environment": {"WANDB_API_KEY": {"variable": "wandb"}, "N": 3,
                                                  "DB_PASSWORD": {"connection": "db"}}})
    assert spec.to_dict()["environment"] == {"WANDB_API_KEY": {"variable": "wandb"}, "N": "3",
                                             "DB_PASSWORD": {"connection": "db", "field": "password"}}
    assert spec.literal_environment() == {"N": "3"} and set(spec.secret_references()) == {"WANDB_API_KEY",
                                                                                          "DB_PASSWORD"}
    assert JobSpec.from_dict(spec.to_dict()) == spec
    for bad, words in (({"variable": ""}, "at least 1"), ({"vault": "x"}, "is not a reference"),
                       ({"connection": "c", "field": "passwd"}, "field")):
        with pytest.raises(SpecError, match=words):
            validate_spec({**BASE, "environment": {"K": bad}})
    # kubernetes delivers references too (a Secret owned by the Job); the same name twice is refused
    assert set(validate_spec({**BASE, "backend": "kubernetes", "image_uri": "img",
                              "environment": {"K": {"variable": "v"}}}).secret_references()) == {"K"}
    with pytest.raises(SpecError, match="kubernetes.secret_env") as err:
        validate_spec({**BASE, "backend": "kubernetes", "image_uri": "img", "environment": {"K": {"variable": "v"}},
                       "kubernetes": {"secret_env": {"K": "s/k"}}})
    assert err.value.field == "environment.K"


# ---- tags (issue 27) -----------------------------------------------------------------------------------------------


def test_tags_as_a_list_or_an_object_travel_as_an_object():
    assert validate_spec({**BASE, "tags": ["baseline", "q3"]}).to_dict()["tags"] == {"baseline": "", "q3": ""}
    assert validate_spec({**BASE, "tags": {"team": "churn", "try": 2}}).tags == {"team": "churn", "try": "2"}
    assert validate_spec(BASE).tags == {}


@pytest.mark.parametrize(
    "tags, field, words",
    [
        ("baseline", "tags", "a list of names"),
        ({"team": {"name": "x"}}, "tags.team", "short strings"),
        ({"bad name": "x"}, "tags.bad name", "only letters, digits"),
        ({"training.dag_id": "other_dag"}, "tags.training.dag_id", "the platform's own"),
        ({"mlflow.runName": "x"}, "tags.mlflow.runName", "the platform's own"),
        ({"note": "two\nlines"}, "tags.note", "one line"),
        ({f"t{i}": "" for i in range(21)}, "tags", "at most 20"),
    ],
)
def test_bad_tags_are_one_line_naming_the_tag(tags, field, words):
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, "tags": tags})
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


ELASTIC = {"torch_distributed": {"elastic": {"min_hosts": 2, "max_hosts": 3, "max_restarts": 4}}}


def test_elastic_pytorch_in_sagemaker_s_distribution_object_reaches_the_runtime_and_the_launcher(tmp_path):
    from training_runtime.layouts import create_directories, layout_for

    from operators.launch.job_configs import write_job_configs
    from operators.launch.local.launcher import LocalLauncherHook

    spec = validate_spec({**BASE, "instance_count": 3, "processes_per_host": 2, "distribution": ELASTIC})
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.distribution_name == "pytorch"
    assert spec.elastic_settings() == {"min_hosts": 2, "max_hosts": 3, "max_restarts": 4}
    # Defaults: max_hosts = instance_count, min_hosts = max_hosts, 3 restarts; the plain forms are not elastic.
    fixed = validate_spec({**BASE, "instance_count": 2, "distribution": {"torch_distributed": {"elastic": {}}}})
    assert fixed.elastic_settings() == {"min_hosts": 2, "max_hosts": 2, "max_restarts": 3}
    assert validate_spec({**BASE, "distribution": {"torch_distributed": {"enabled": True}}}).elastic_settings() is None
    assert validate_spec({**BASE, "distribution": "pytorch"}).elastic_settings() is None
    layout = create_directories(layout_for("ti", tmp_path / "job"), [])
    write_job_configs(spec, layout, LocalLauncherHook())
    import json

    job_config = json.loads((tmp_path / "job" / "input" / "config" / "trainingjobconfig.json").read_text())
    assert (job_config["distribution"], job_config["elastic"]) == ("pytorch", spec.elastic_settings())


@pytest.mark.parametrize("elastic, field, message", [
    ({"min_hosts": 4}, "distribution.torch_distributed.elastic.min_hosts",
     "is 4, more than max_hosts 3 (instance_count); give 1 to 3"),
    ({"min_hosts": 3, "max_hosts": 2}, "distribution.torch_distributed.elastic.max_hosts",
     "is 2 but instance_count is 3: the job starts instance_count hosts; make them equal, or leave max_hosts out"),
    ({"max_hosts": 5}, "distribution.torch_distributed.elastic.max_hosts", "is 5 but instance_count is 3"),
    ({"min_hosts": 0}, "distribution.torch_distributed.elastic.min_hosts", "must be >= 1, got 0"),
    ({"max_restarts": -1}, "distribution.torch_distributed.elastic.max_restarts", "must be >= 0, got -1"),
    ({"max_restarts": 1000}, "distribution.torch_distributed.elastic.max_restarts", "must be <= 100, got 1000"),
    ({"min_hosts": True}, "distribution.torch_distributed.elastic.min_hosts", "must be an integer, got true"),
    ({"min_hosts": "two"}, "distribution.torch_distributed.elastic.min_hosts", "must be an integer"),
    ({"min_host": 2}, "distribution.torch_distributed.elastic.min_host", "did you mean 'min_hosts'?"),
])
def test_bad_elastic_values_give_one_line_naming_the_field(elastic, field, message):
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, "instance_count": 3, "distribution": {"torch_distributed": {"elastic": elastic}}})
    assert str(err.value) == f"{field}: {message}" or (err.value.field == field and message in str(err.value))
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize("distribution, field, message", [
    ({"torch_distributed": {"enabled": False}}, "distribution.torch_distributed.enabled",
     "is false: leave distribution out for no launcher, or set it to pytorch"),
    ({"pytorchddp": {"enabled": True}}, "distribution.pytorchddp", "is not a field of"),
    ({}, "distribution.torch_distributed", "is required"),
    (["pytorch"], "distribution", "must be one of pytorch, tensorflow, mpi or an object, got [\"pytorch\"]"),
    ("horovod", "distribution", '"horovod" is not one of pytorch, tensorflow, mpi'),
])
def test_a_bad_distribution_object_gives_one_line(distribution, field, message):
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, "instance_count": 2, "distribution": distribution})
    assert err.value.field == field and message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_processes_per_host_and_elastic_go_together():
    spec = validate_spec({**BASE, "processes_per_host": 4, "distribution": {"torch_distributed": {"enabled": True}}})
    assert spec.processes_per_host == 4 and spec.distribution_name == "pytorch"

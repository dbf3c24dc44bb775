"""Every refusal: exit code 2, one clear error line, nothing run, the reason in output/failure."""

import json
import os
from pathlib import Path

import pytest

# The entry point leaves a mark if it ever runs.
MARKING_SCRIPT = "import os\nopen(os.path.join(os.environ['TRAINING_ROOT'], 'RAN'), 'w').close()\n"


def assert_refused(job, result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("[train] ERROR:")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    assert not (job.root / "RAN").exists()
    assert not job.succeeded
    assert job.failure is not None and errors[0].split("ERROR: ", 1)[1] in job.failure


@pytest.fixture
def job(make_job):
    return make_job(code={"train.py": MARKING_SCRIPT}, hyperparameters={"epochs": 1})


def _rewrite(job, filename, **changes):
    path = Path(job.layout.config_file(filename))
    document = json.loads(path.read_text())
    document.update(changes)
    path.write_text(json.dumps(document))


def test_missing_entry_point_file(make_job):
    job = make_job(entry_point="missing.py", code={"train.py": MARKING_SCRIPT})
    assert_refused(job, job.run(), "entry point 'missing.py'", "not found", job.layout.code_dir)


def test_entry_point_outside_the_code_dir(make_job):
    job = make_job(entry_point="../input/config/x.py", code={"train.py": MARKING_SCRIPT})
    assert_refused(job, job.run(), "outside the code directory")


def test_nothing_to_run(make_job):
    job = make_job(entry_point=None, code={"train.py": MARKING_SCRIPT})
    assert_refused(job, job.run(), "nothing to run", "'entry_point' or 'command'")


def test_non_executable_entry_point_without_extension(make_job):
    job = make_job(entry_point="train", code={"train": MARKING_SCRIPT})
    assert_refused(job, job.run(), "neither a .py nor a .sh", "chmod +x")


@pytest.mark.parametrize("filename", ["hyperparameters.json", "resourceconfig.json", "inputdataconfig.json"])
def test_missing_config_file(job, filename):
    os.remove(job.layout.config_file(filename))
    assert_refused(job, job.run(), "missing config file", filename)


def test_malformed_config_file(job):
    Path(job.layout.config_file("resourceconfig.json")).write_text('{"hosts": ["algo-1"')
    assert_refused(job, job.run(), "resourceconfig.json is not valid JSON")


def test_hosts_must_be_a_list(job):
    _rewrite(job, "resourceconfig.json", hosts="algo-1")
    assert_refused(job, job.run(), "'hosts' must be a non-empty list")


def test_names_that_clash_after_sanitising(make_job):
    job = make_job(code={"train.py": MARKING_SCRIPT}, hyperparameters={"batch-size": 32, "batch_size": 64})
    assert_refused(job, job.run(), "'batch-size' and 'batch_size'", "PAI_HPS_BATCH_SIZE", "rename one")


def test_names_that_clash_by_case(make_job):
    job = make_job(code={"train.py": MARKING_SCRIPT}, hyperparameters={"lr": 1, "LR": 2})
    assert_refused(job, job.run(), "'lr' and 'LR'")


def test_empty_hyperparameter_name(make_job):
    job = make_job(code={"train.py": MARKING_SCRIPT}, hyperparameters={"": "5"})
    assert_refused(job, job.run(), "empty name")


@pytest.mark.parametrize("channel", ["train data", "a/b", "trän", "x.y"])
def test_bad_channel_name(make_job, channel):
    job = make_job(code={"train.py": MARKING_SCRIPT}, channels=[])
    Path(job.layout.config_file("inputdataconfig.json")).write_text(json.dumps({channel: {}}))
    assert_refused(job, job.run(), "channel name %r" % channel, "letters, digits")


def test_channels_that_clash_after_sanitising(make_job):
    job = make_job(code={"train.py": MARKING_SCRIPT}, channels=["train-data", "train_data"])
    assert_refused(job, job.run(), "'train-data' and 'train_data'")


def test_current_host_not_in_hosts(job):
    assert_refused(job, job.run("--current-host", "algo-9"), "'algo-9'", "--current-host", "not in 'hosts'")


def test_current_host_from_resourceconfig_not_in_hosts(job):
    _rewrite(job, "resourceconfig.json", current_host="other")
    assert_refused(job, job.run(), "'other'", "current_host")


def test_job_completion_index_out_of_range(job):
    assert_refused(job, job.run(env={"JOB_COMPLETION_INDEX": "3"}), "JOB_COMPLETION_INDEX=3")


def test_unknown_layout_flag(job):
    assert_refused(job, job.run("--layout", "azure"), "unknown layout 'azure'", "ti, sagemaker, pai, modelarts")


def test_unknown_layout_in_job_config(job):
    _rewrite(job, "trainingjobconfig.json", layout="azure")
    assert_refused(job, job.run(), "unknown layout 'azure'")


def test_unknown_distribution(job):
    _rewrite(job, "trainingjobconfig.json", distribution="horovod")
    assert_refused(job, job.run(), "'distribution'", "pytorch, tensorflow, mpi")


@pytest.mark.parametrize("field, value", [("processes_per_host", 0), ("master_port", "29500"), ("num_gpus", -1)])
def test_bad_job_config_numbers(job, field, value):
    _rewrite(job, "trainingjobconfig.json", **{field: value})
    assert_refused(job, job.run(), "'%s' must be an integer" % field)


def test_channel_files_for_an_unknown_channel(job):
    _rewrite(job, "trainingjobconfig.json", channel_files={"test": "t.csv"})
    assert_refused(job, job.run(), "'channel_files'", "'test'")


def test_too_many_parameter_servers(make_job):
    job = make_job(code={"train.py": MARKING_SCRIPT}, hosts=["algo-1", "algo-2"],
                   distribution="tensorflow", parameter_servers=2)
    assert_refused(job, job.run(), "'parameter_servers' is 2", "at least one worker")


def test_refused_before_requirements_are_installed(make_job):
    job = make_job(entry_point="missing.py", code={"requirements.txt": "this-package-does-not-exist-xyz==1\n"})
    assert_refused(job, job.run(), "entry point 'missing.py'")
    assert not (job.root / ".venv-job").exists()


def test_missing_root(tmp_path, make_job):
    job = make_job()
    missing = tmp_path / "nope"
    result = job.run("--root", str(missing), root=False)
    assert result.returncode == 2
    assert "job root %s does not exist" % missing in result.stderr
    assert not missing.exists()


def test_unknown_job_config_keys_only_warn(job):
    _rewrite(job, "trainingjobconfig.json", entrypoint="typo.py")
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert "WARNING" in result.stderr and "entrypoint" in result.stderr

"""A data-plane step's view of the validated spec (operators/jobspec/validated.py): it reads every field as the model
has it, the model's properties and methods too, from the dict validate_spec returned; it refuses a job or channel
name that would make a path the step should not write; and reading the plain fields imports no pydantic."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from operators.jobspec.errors import SpecError
from operators.jobspec.model import JobSpec
from operators.jobspec.ownership import OWNER_KEY
from operators.jobspec.validated import MODEL_FIELDS, PLAIN_FIELDS, ValidatedSpec
from operators.launch.spec import validate_spec

ROOT = Path(__file__).resolve().parents[3]
BASE = {"job_name": "churn-1", "source_dir": "s3://bucket/code/", "output_path": "s3://bucket/models",
        "entry_point": "train.py"}
SPECS = [
    BASE,
    {**BASE, "backend": "kubernetes", "inputs": {"train": "s3://d/train/", "eval": "s3://d/eval.csv"},
     "hyperparameters": {"lr": 0.1, "epochs": 3, "name": "x", "flag": True}, "tags": ["baseline"],
     "connections": {"s3": "my_store"}, "checkpoint_path": "s3://bucket/ckpt/", "resume_from": "latest",
     "instance_count": 2, "processes_per_host": 4, "distribution": "pytorch", "max_run_seconds": 600,
     "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1}, "image_uri": "train:1", "layout": "sagemaker",
     "environment": {"MODE": "fast", "TOKEN": {"variable": "token"}}, "kubernetes": {"namespace": "team-a"},
     "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
     "reproduces": {"job_name": "churn-0", "code_digest": "sha256:" + "c" * 64,
                    "data_versions": {"train": "a" * 64, "eval": "b" * 64}}},
    {**BASE, "command": "python train.py", "entry_point": None, "base_job_name": "churn",
     "instance_count": 2, "distribution": {"torch_distributed": {"elastic": {"min_hosts": 1, "max_hosts": 2}}}, "docker": {"shm_size": "1g"}},
]


def test_every_field_of_the_spec_is_read_one_way_or_the_other():
    assert PLAIN_FIELDS | MODEL_FIELDS == set(JobSpec.model_fields)
    assert not PLAIN_FIELDS & MODEL_FIELDS


@pytest.mark.parametrize("raw", SPECS)
def test_the_view_reads_every_field_property_and_method_as_the_model_does(raw):
    spec = validate_spec(raw)
    data = {**spec.to_dict(), OWNER_KEY: "alice"}  # as the step's payload carries it, the owner beside the spec
    view = ValidatedSpec(data)
    for name in JobSpec.model_fields:
        assert getattr(view, name) == getattr(spec, name), name
    assert view.job_output_uri == spec.job_output_uri
    assert view.backend_options() == spec.backend_options()
    assert view.elastic_settings() == spec.elastic_settings()
    assert view.literal_environment() == spec.literal_environment()


@pytest.mark.parametrize(("change", "field"), [({"job_name": "../x"}, "job_name"), ({"job_name": None}, "job_name"),
                                               ({"inputs": {"../up": "s3://d/x/"}}, "inputs")])
def test_a_name_that_would_make_a_path_elsewhere_is_refused(change, field):
    with pytest.raises(SpecError) as raised:
        ValidatedSpec({**validate_spec(BASE).to_dict(), **change})
    assert raised.value.field == field


def test_reading_the_plain_fields_imports_no_pydantic():
    job = validate_spec({**BASE, "inputs": {"train": "s3://d/train/"}}).to_dict()
    code = textwrap.dedent(f"""
        import json, sys
        from operators.jobspec.validated import ValidatedSpec
        view = ValidatedSpec(json.loads({json.dumps(job)!r}))
        said = [view.job_name, view.inputs, view.layout, view.backend, view.connections, view.reproduces]
        print(json.dumps({{"said": said, "pydantic": "pydantic" in sys.modules}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": f"{ROOT}:{ROOT / 'runtime'}"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"said": ["churn-1", {"train": "s3://d/train/"}, "ti", "local", {}, None], "pydantic": False}

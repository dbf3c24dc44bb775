"""Client-side validation against the training_job DAG's own Params (dumped the way the REST API serves them)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from training_sdk.errors import SpecValidationError
from training_sdk.validation import validate_against_params

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def params():
    dag = runpy.run_path(str(REPO / "dags" / "training_job.py"))["dag"]
    # GET /api/v2/dags/{id}/details serves {name: Param.dump()}; the JSON round trip is what the client sees
    return json.loads(json.dumps({name: dag.params.get_param(name).dump() for name in dag.params}, default=str))


GOOD = {"job_name": "ok-1", "source_dir": "/code", "entry_point": "train.py", "output_path": "s3://b/models",
        "hyperparameters": {"epochs": 3}, "inputs": {"train": "s3://b/train/"}, "instance_count": 2}


def test_a_good_spec_passes(params):
    validate_against_params(GOOD, params, "training_job")


@pytest.mark.parametrize("change, field, message", [
    ({"instance_count": 0}, "instance_count", "less than the minimum of 1"),
    ({"instance_count": "two"}, "instance_count", "is not of type 'integer'"),
    ({"job_name": "Bad_Name"}, "job_name", "does not match"),
    ({"layout": "azure"}, "layout", "is not one of"),
    ({"hyperparameters": [1, 2]}, "hyperparameters", "is not of type 'object'"),
    ({"max_run_seconds": 0}, "max_run_seconds", "less than the minimum"),
    ({"epochs": 3}, "epochs", "is not a parameter of DAG training_job"),
])
def test_a_bad_field_is_named(params, change, field, message):
    with pytest.raises(SpecValidationError, match=message) as err:
        validate_against_params({**GOOD, **change}, params, "training_job")
    assert err.value.field == field
    assert str(err.value).startswith(f"job spec field '{field}': ")


def test_a_required_field_without_a_default_is_reported(params):
    spec = {k: v for k, v in GOOD.items() if k != "output_path"}
    with pytest.raises(SpecValidationError, match="'output_path': is required by DAG training_job"):
        validate_against_params(spec, params, "training_job")

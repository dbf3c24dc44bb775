"""The spec's `reproduces` section: a reproduction pins every input channel and only those, its code digest has the
digest's form, unknown keys are refused; the trigger form offers it as an optional object."""

from __future__ import annotations

import pytest

from operators.jobspec.errors import SpecError
from operators.launch.spec import validate_spec
from operators.pipelines.params import training_job_params, validating_schema

VERSION = "a" * 64
DIGEST = "sha256:" + "c" * 64


def _spec(inputs=None, **reproduces):
    raw = {"job_name": "churn-repro", "source_dir": "s3://code/churn/", "entry_point": "train.py",
           "output_path": "s3://models/churn", "inputs": inputs if inputs is not None else {"train": "s3://d/train/"},
           "reproduces": {"job_name": "churn-1", "code_digest": DIGEST, "data_versions": {"train": VERSION},
                          **reproduces}}
    return validate_spec(raw)


def test_a_reproduction_carries_its_reference_and_pins():
    spec = _spec(image_digest="sha256:" + "d" * 64)
    assert spec.reproduces.job_name == "churn-1" and spec.reproduces.data_versions == {"train": VERSION}
    assert spec.reproduces.allow_changed_data is False
    assert validate_spec(spec.to_dict()).reproduces == spec.reproduces  # round-trips through XCom


@pytest.mark.parametrize("inputs, pins, field, words", [
    ({"train": "s3://d/train/", "test": "s3://d/test/"}, {"train": VERSION}, "reproduces.data_versions",
     "no data version for channel 'test'"),
    ({}, {"train": VERSION}, "reproduces.data_versions.train", "pins channel 'train', which inputs does not name"),
])
def test_pinned_channels_are_the_specs_channels(inputs, pins, field, words):
    with pytest.raises(SpecError) as refused:
        _spec(inputs, data_versions=pins)
    assert refused.value.field == field and words in refused.value.problem


def test_a_malformed_digest_or_an_unknown_key_is_refused_naming_it():
    with pytest.raises(SpecError, match=r"^reproduces.code_digest: 'abc' is not a code digest"):
        _spec(code_digest="abc")
    with pytest.raises(SpecError, match=r"^reproduces.allow_changed_dat"):
        _spec(allow_changed_dat=True)


def test_the_trigger_form_offers_it_as_an_optional_object():
    param = training_job_params()["reproduces"]
    assert param.value is None and "null" in param.schema["type"] and "object" in param.schema["type"]
    assert validating_schema(param.schema)["properties"]["allow_changed_data"]["type"] == "boolean"
    assert validating_schema(param.schema)["additionalProperties"] is False

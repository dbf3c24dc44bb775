"""The trigger form's Params, generated from the spec model: what the UI renders and what it refuses."""

from __future__ import annotations

import json

import pytest

from operators.pipelines.params import training_job_params, validating_schema
from operators.jobspec.model import JobSpec

GOOD = {"source_dir": "s3://b/code/", "output_path": "s3://b/models", "entry_point": "train.py"}


def resolved(conf: dict) -> dict:
    from airflow.sdk import ParamsDict

    params = ParamsDict(training_job_params())
    for key, value in conf.items():
        params[key] = value
    return params.validate()


def test_every_spec_field_is_a_param_with_a_section_and_description():
    params = training_job_params()
    assert list(params) == list(JobSpec.model_fields)
    for name, param in params.items():
        assert param.schema.get("section"), name
        assert param.description, name
    json.dumps({name: param.dump() for name, param in params.items()})  # the form's JSON


def test_object_fields_default_to_empty_objects_and_lists_not_null():
    params = training_job_params()
    for name in ("hyperparameters", "inputs", "resources", "environment", "connections", "kubernetes", "docker"):
        assert params[name].value == {}, name
        assert params[name].schema["type"] == ["object", "null"], name  # optional in the form: no required star
    assert params["metric_definitions"].value == []


def test_metric_definitions_are_a_list_of_objects_with_name_and_regex():
    schema = training_job_params()["metric_definitions"].schema
    assert schema["type"] == ["array", "null"] and schema["items"]["type"] == "object"  # the form: a JSON editor
    item = validating_schema(schema)["items"]
    assert item["type"] == "object" and set(item["required"]) == {"Name", "Regex"}
    assert item["additionalProperties"] is False


def test_enums_are_dropdowns_with_labels_and_run_defaults_may_stay_empty():
    params = training_job_params()
    backend = params["backend"].schema
    assert backend["enum"] == [None, "local", "kubernetes", "docker"]
    assert backend["values_display"]["kubernetes"] == "Kubernetes Job"
    assert backend["values_display"]["null"] == "(empty: the default)"  # not a bare "null" in the dropdown
    assert params["layout"].schema["values_display"]["pai"].startswith("PAI")
    # A word or the elastic object: a field of several types, each form checked by the schema's anyOf.
    assert params["distribution"].schema["type"] == ["null", "string", "object"]
    assert validating_schema(params["distribution"].schema)["anyOf"][0]["enum"] == ["pytorch", "tensorflow", "mpi"]
    assert params["backend"].value is None and params["job_name"].value is None
    assert validating_schema(params["kubernetes"].schema)["properties"]["image_pull_policy"]["enum"] == [
        None, "Always", "IfNotPresent", "Never"]


@pytest.mark.parametrize("distribution", [None, "pytorch", "mpi", {"torch_distributed": {"enabled": True}},
                                          {"torch_distributed": {"elastic": {"min_hosts": 2, "max_restarts": 3}}}])
def test_the_form_takes_each_form_of_distribution(distribution):
    assert resolved({**GOOD, "instance_count": 3, "distribution": distribution})["distribution"] == distribution


def test_a_good_conf_passes_and_defaults_pre_fill_the_form():
    values = resolved({**GOOD, "resources": {"cpu": 2, "memory": "4Gi", "gpu": 1},
                       "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                       "kubernetes": {"namespace": "ml"}, "hyperparameters": {"lr": 0.1, "tag": "a", "x": None}})
    assert values["resources"]["cpu"] == 2 and values["max_run_seconds"] == 86400
    assert training_job_params({"instance_count": 3})["instance_count"].value == 3


@pytest.mark.parametrize(
    "change, words",
    [
        ({"kubernetes": {"namspace": "ml"}}, "namspace"),
        ({"resources": {"gpu": -1}}, "minimum"),
        ({"backend": "slurm"}, "slurm"),
        ({"hyperparameters": {"x": [1, 2]}}, "[1, 2]"),
        ({"docker": {"keep_containers": "yes"}}, "yes"),
        ({"metric_definitions": [{"Name": "loss"}]}, "Regex"),
        ({"connections": {"gcs": "x"}}, "gcs"),
        ({"instance_count": 0}, "minimum"),
        ({"distribution": "horovod"}, "horovod"),
        ({"distribution": {"torch_distributed": {"elastic": {"min_host": 2}}}}, "min_host"),
        ({"distribution": {"torch_distributed": {"elastic": {"max_restarts": -1}}}}, "-1"),
    ],
)
def test_the_form_refuses_bad_values_before_a_run(change, words):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError) as err:
        resolved({**GOOD, **change})
    assert words in str(err.value)


def test_the_kubernetes_example_job_of_the_docs_is_a_valid_spec_and_passes_the_trigger_form():
    import json
    import re
    from pathlib import Path

    from airflow.sdk.definitions.param import ParamsDict

    from operators.pipelines.params import training_job_params
    from operators.launch.spec import validate_spec

    doc = (Path(__file__).resolve().parents[3] / "docs/kubernetes.md").read_text()
    section = doc[doc.index("## An example job with `backend: kubernetes`"):]
    example = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    params = ParamsDict(training_job_params())
    for key, value in example.items():
        params[key] = value
    params.validate()
    spec = validate_spec(example, default_job_name="resnet-ddp-1", default_base_job_name="resnet-ddp",
                         default_backend="local", default_layout="ti")
    assert (spec.backend, spec.instance_count) == ("kubernetes", 2)


def test_params_name_draft_7_and_refuse_what_the_default_dialect_refuses():
    """Airflow checks a Param's schema against its dialect's meta-schema each time it resolves one (serializing a DAG,
    comparing a task's Params with the DAG's, every task start): the Params name draft 7, whose meta-schema check costs
    a fifth of 2020-12's (bench/README.md, "No-op job"), and a value is accepted or refused as under 2020-12."""
    from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker
    from jsonschema.validators import validator_for

    samples = [None, "", "x", 0, 1, -1, 2.5, True, [], ["a"], [1], {}, {"a": 1}, {"a": "b"}, {"a": {"b": 1}},
               "pytorch", {"torch_distributed": {"elastic": {"min_hosts": 1, "max_hosts": 2}}},
               {"image_pull_policy": "Always"}, {"image_pull_policy": "sometimes"}, {"poll_interval": 0},
               {"poll_interval": 1}, [{"name": "loss", "regex": "loss=(\\S+)"}], [{"name": "loss"}]]
    for name, param in training_job_params().items():
        assert validator_for(param.schema) is Draft7Validator, name
        Draft7Validator.check_schema(param.schema)
        draft7 = Draft7Validator(param.schema, format_checker=FormatChecker())
        latest = Draft202012Validator({k: v for k, v in param.schema.items() if k != "$schema"},
                                      format_checker=FormatChecker())
        for value in [param.value, *samples]:
            assert draft7.is_valid(value) == latest.is_valid(value), (name, value)


# What Airflow's trigger form reads of a Param's schema (airflow/ui FlexibleForm: FieldSelector, FieldRow, the fields).
FORM_KEYS = ("type", "enum", "values_display", "section", "title", "description_md", "examples", "format", "minLength",
             "maxLength", "minimum", "maximum")


def test_the_form_reads_on_each_param_what_its_whole_schema_says():
    """A Param with nested keywords keeps them behind a "$ref" (the whole schema, which validates); what the form
    renders from is on top, as the whole schema says it: the form is the one the spec model gave before."""
    for name, param in training_job_params().items():
        whole = validating_schema(param.schema)
        for key in FORM_KEYS:
            if key in whole:
                assert param.schema.get(key) == whole[key], (name, key)
        if isinstance(whole.get("items"), dict):
            assert param.schema["items"].get("type") == whole["items"].get("type"), name  # lines or a JSON editor
        assert param.schema.get("section"), name


def test_a_pass_over_the_params_checks_small_schemas():
    """Airflow checks each Param's schema against draft 7's meta-schema every time it resolves one (~56 times a
    dag.test() run, 2 per operator each time the dag-processor serializes the DAG); that check walks every subschema
    draft 7 knows. Nested keywords sit under "$defs", which it does not walk: a pass walks 27 subschemas (110 before,
    then ~3/4 of a pass's cost), and the whole schema still passes the meta-schema check."""
    from jsonschema import Draft7Validator

    def walked(schema) -> int:  # the subschemas draft 7's meta-schema descends into ("$defs" is not one of them)
        if isinstance(schema, list):
            return sum(walked(v) for v in schema)
        if not isinstance(schema, dict):
            return 0
        return 1 + sum(walked(list(v.values()) if k in ("properties", "patternProperties", "definitions") else v)
                       for k, v in schema.items() if k in ("properties", "additionalProperties", "patternProperties",
                                                           "propertyNames", "items", "anyOf", "oneOf", "allOf", "not",
                                                           "definitions", "dependencies"))

    params = training_job_params()
    assert sum(walked(p.schema) for p in params.values()) <= 40
    for name, param in params.items():
        Draft7Validator.check_schema(param.schema)
        Draft7Validator.check_schema(validating_schema(param.schema))
        if "$ref" in param.schema:
            assert "section" not in validating_schema(param.schema), name  # the form's keys do not validate

"""The trigger form of a training DAG, generated from the job spec model (operators/jobspec/model.py) and each backend's
options model (its section: operators/launch/<backend>/options.py): one Param per field, with the models' types, enums
(dropdowns with labels), defaults, descriptions and sections.

The same JSON schema validates `airflow dags trigger --conf`, the REST API and the UI form (unknown keys at any
level, wrong types, out-of-range numbers are refused before a run starts); `validate_spec` then checks what a JSON
schema cannot (name clashes, URI schemes, regexes, cross-field rules) in the first task and names the field.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from airflow.sdk import Param

from operators.jobspec.model import LABELS, SCHEMES, JobSpec
from operators.launch.registry import option_models

# Each Param's schema names JSON Schema draft 7: Airflow validates a Param (jsonschema.validate) every time it resolves,
# dumps, compares or repr()s one, and each validation first checks the schema itself against its dialect's meta-schema.
# Against the default (2020-12, whose meta-schema resolves $dynamicRef) that check made the 24 Params cost ~0.077 s of
# CPU per pass and a dag.test() run of training_job ~56 passes (~4 s, more than every stage's work: bench/README.md,
# "No-op job"); against draft 7's it is ~0.014 s. The keywords used here mean the same in both drafts (no $ref, no
# prefixItems; `items` is one schema, `exclusiveMinimum` a number).
PARAM_SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"

# That meta-schema check walks every subschema of a Param's schema, and the nested ones (the kubernetes options' 28
# properties, distribution's object form, ...) were ~3/4 of its cost: ~0.022 s of the ~0.029 s a pass over the 24 Params
# cost, ~56 passes a dag.test() run and 2 per operator each time the dag-processor serializes the DAG (bench/README.md,
# "No-op job"). So a Param with nested keywords keeps at its top only what the form reads (type, enum, labels,
# section, bounds, `items`' type: Airflow's FlexibleForm renders an object field as a JSON editor and reads nothing
# deeper) and validates through "$ref" to its whole schema under "$defs", a keyword draft 7 does not know, so its
# meta-schema does not walk it. Draft 7 ignores the keywords beside a "$ref"; 2020-12 (the SDK's client-side check,
# sdk/training_sdk/validation.py) applies both, which agree. Values are accepted and refused exactly as before.
_NESTED = ("properties", "additionalProperties", "patternProperties", "propertyNames", "required", "items", "anyOf",
           "oneOf", "allOf", "not", "if", "then", "else", "dependencies", "contains")
# Keys only the form reads (Airflow keeps them in the schema): never part of what validates a value.
_FORM_ONLY = ("section", "values_display", "description_md")
VALIDATES = "value"  # the name of a Param's whole schema under "$defs"

# Filled at run time from the run (job_name) or airflow.cfg [training] (backend, layout): optional in the form.
_RUN_DEFAULTS = ("job_name", "backend", "layout")
_SCALAR = {"type": ["string", "number", "integer", "boolean", "null"]}
_OVERRIDES: dict[str, dict[str, Any]] = {
    "hyperparameters": {"additionalProperties": _SCALAR},
    # A value, or a secret by reference (operators/jobspec/secret_refs.py).
    "environment": {"additionalProperties": {"anyOf": [
        {"type": ["string", "number", "integer", "boolean"]},
        {"type": "object", "properties": {"variable": {"type": "string", "minLength": 1}},
         "required": ["variable"], "additionalProperties": False},
        {"type": "object", "properties": {"connection": {"type": "string", "minLength": 1},
                                          "field": {"type": "string"}},
         "required": ["connection"], "additionalProperties": False},
    ]}},
    "inputs": {"additionalProperties": {"type": "string", "minLength": 1}},
    # a list of names or an object of name -> value (operators/jobspec/tags.py checks names and lengths)
    "tags": {"type": ["object", "array", "null"], "additionalProperties": {"type": ["string", "number"]},
             "items": {"type": "string"}},
    "connections": {"additionalProperties": {"type": "string", "minLength": 1}, "propertyNames":
                    {"enum": list(SCHEMES)}},
    # pytorch / tensorflow / mpi, or the object {"torch_distributed": {"elastic": {...}}} (the anyOf checks which): a
    # field of several types, where the form takes a word or a JSON object (a dropdown could not offer the object).
    "distribution": {"type": ["null", "string", "object"]},
}


def _inline(schema: Any, defs: Mapping[str, Any]) -> Any:
    """The schema with every local $ref replaced by its definition (a Param's schema stands alone)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            return {**_inline(defs[name], defs), **{k: v for k, v in schema.items() if k != "$ref"}}
        return {k: _inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _simplify(schema: Any) -> Any:
    """pydantic's anyOf [X, null] -> X with "null" added to its type (and enum): what the form renders best."""
    if isinstance(schema, list):
        return [_simplify(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {k: _simplify(v) for k, v in schema.items() if k != "title"}
    options = schema.get("anyOf")
    if options and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) == 1 and isinstance(rest[0].get("type"), str):
            merged = {**rest[0], **{k: v for k, v in schema.items() if k != "anyOf"}}
            merged["type"] = ["null", rest[0]["type"]]
            if "enum" in merged:
                merged["enum"] = [None, *merged["enum"]]
            return merged
        if all(isinstance(o.get("type"), str) and set(o) == {"type"} for o in rest):
            return {**{k: v for k, v in schema.items() if k != "anyOf"}, "type": ["null", *[o["type"] for o in rest]]}
    return schema


def _options_schema(model: Any, field_schema: Mapping[str, Any]) -> dict[str, Any]:
    """A backend's options section: a JSON object in the spec's model, its backend's model gives its fields; the
    spec's field gives its description and section."""
    schema = model.model_json_schema(mode="validation")
    defs = schema.pop("$defs", {})
    own = {k: v for k, v in field_schema.items() if k not in ("type", "additionalProperties", "title")}
    return {**_inline(schema, defs), **own}


def field_schemas() -> dict[str, dict[str, Any]]:
    """The JSON schema of every top-level spec field, standalone (refs inlined, nullable types simplified)."""
    schema = JobSpec.model_json_schema(mode="validation")
    defs = schema.get("$defs", {})
    sections = option_models()
    fields = {}
    for name, field_schema in schema["properties"].items():
        if name in sections:
            field_schema = _options_schema(sections[name], field_schema)
        result = _simplify(_inline(copy.deepcopy(field_schema), defs))
        result.update(_OVERRIDES.get(name, {}))
        if name in LABELS:
            result["values_display"] = dict(LABELS[name])
        fields[name] = result
    return fields


def _with_nested_behind_ref(schema: dict[str, Any]) -> dict[str, Any]:
    """The Param's schema as Airflow gets it: unchanged when flat; else the form's keys on top and the whole schema
    under "$defs", which a "$ref" validates against (see PARAM_SCHEMA_DIALECT)."""
    if not any(isinstance(schema.get(key), (dict, list)) for key in _NESTED):
        return schema
    top = {k: v for k, v in schema.items() if k not in _NESTED}
    if isinstance(schema.get("items"), dict) and "type" in schema["items"]:
        top["items"] = {"type": schema["items"]["type"]}  # the form: a list of lines (strings) or a JSON editor
    whole = {k: v for k, v in schema.items() if k not in _FORM_ONLY and k != "$schema"}
    return {**top, "$ref": f"#/$defs/{VALIDATES}", "$defs": {VALIDATES: whole}}


def validating_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema that judges a Param's value (its nested keywords included), whichever form the Param keeps."""
    return schema["$defs"][VALIDATES] if schema.get("$ref") == f"#/$defs/{VALIDATES}" else schema


def _empty_default(schema: Mapping[str, Any]) -> Any:
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds:
        return {}
    if "array" in kinds:
        return []
    return None


def training_job_params(defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Params for a training DAG; `defaults` pre-fills the form (e.g. the shipped example)."""
    given = dict(defaults or {})
    required = set(JobSpec.model_json_schema(mode="validation").get("required", ())) - set(_RUN_DEFAULTS)
    params = {}
    for name, schema in field_schemas().items():
        description = schema.pop("description", None)
        section = schema.pop("section", None)
        default = schema.pop("default", _empty_default(schema))
        if name in _RUN_DEFAULTS:
            schema["type"] = ["null", schema.get("type", "string")] if isinstance(schema.get("type"), str) else \
                schema.get("type", ["null", "string"])
            if "enum" in schema and None not in schema["enum"]:
                schema["enum"] = [None, *schema["enum"]]
            default = None
        if default in ({}, []) and isinstance(schema.get("type"), str):
            # Airflow's form stars (and demands) every field whose type excludes null: an empty object or list is
            # optional. Null (a cleared editor) is dropped by validate_spec like any empty field.
            schema["type"] = [schema["type"], "null"]
        if None in schema.get("enum", ()) and "values_display" in schema:
            # the form labels the empty choice with its value ("null") unless told otherwise
            schema["values_display"] = {"null": "(empty: the default)", **schema["values_display"]}
        default = given.get(name, default)
        schema["$schema"] = PARAM_SCHEMA_DIALECT
        if name in required and default is None:
            schema = _with_nested_behind_ref({"section": section, "minLength": 1, **schema})
            params[name] = Param(description=description, **schema)  # no default
        else:
            schema = _with_nested_behind_ref({"section": section, **schema})
            params[name] = Param(default, description=description, **schema)
    return params

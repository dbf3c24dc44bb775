"""Check a job spec on the client against the DAG's own Params schema (fetched from the REST API), before anything is
uploaded or triggered. The schema is the DAG's, so the client never disagrees with the server about which fields
exist and what they hold; the DAG's validate_spec task still checks what a JSON schema cannot (name clashes, URI
schemes), and its error comes back as the job's failure reason.
"""

from __future__ import annotations

from typing import Any, Mapping

from training_sdk.errors import SpecValidationError


def _schema_of(param: Mapping[str, Any]) -> dict[str, Any]:
    schema = dict(param.get("schema") or {})
    # Airflow's Param keeps UI-only keys (section, description) in the schema too; they do not constrain values.
    for key in ("section", "description", "title", "values_display", "description_md"):
        schema.pop(key, None)
    return schema


def _allows_null(schema: Mapping[str, Any]) -> bool:
    types = schema.get("type")
    return types is None or types == "null" or (isinstance(types, list) and "null" in types)


def validate_against_params(spec: Mapping[str, Any], params: Mapping[str, Mapping[str, Any]], dag_id: str) -> None:
    """Raise SpecValidationError naming the first bad field: unknown to the DAG, required and missing, or not
    matching its schema (type, enum, pattern, bounds, ...) the way Airflow's Param.resolve would judge it."""
    # lazy: jsonschema, only where a spec is checked against the DAG's params
    from jsonschema import Draft202012Validator, FormatChecker

    for name in spec:
        if name not in params:
            raise SpecValidationError(name, f"is not a parameter of DAG {dag_id}; known: {', '.join(sorted(params))}")
    for name, param in params.items():
        schema = _schema_of(param)
        value = spec.get(name, param.get("value"))
        if value is None:
            if _allows_null(schema):
                continue
            raise SpecValidationError(name, f"is required by DAG {dag_id}"
                                            + (f" ({param['description']})" if param.get("description") else ""))
        validator = Draft202012Validator(schema, format_checker=FormatChecker())
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.path))), None)
        if error is not None:
            where = ".".join([name, *(str(p) for p in error.path)])
            raise SpecValidationError(where, error.message)

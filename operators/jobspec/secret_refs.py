"""Secrets by reference: the spec's `environment` values {"variable": ...} / {"connection": ..., "field": ...} read
from Airflow (Variables, connections, any secrets backend) at launch, straight into the launch request's secret_env,
and registered with Airflow's secrets masker so a task log shows them as ***. The spec, XCom and rendered fields
only ever hold the references; backends deliver the values without writing them to the job root (local:
`train`'s environment, on a descriptor: operators/launch/local/job_variables.py; docker: a read-only file outside
the job root; kubernetes: a Secret owned by the Job).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping

from operators.jobspec.errors import SpecError


def _connection_field(conn: Any, field: str) -> str | None:
    if field == "uri":
        return conn.get_uri()
    if field == "extra":
        return conn.extra or ""
    if field.startswith("extra."):
        value = (conn.extra_dejson or {}).get(field.split(".", 1)[1])
        return None if value is None else value if isinstance(value, str) else json.dumps(value)
    value = getattr(conn, field, None)
    return None if value is None else str(value)


def read_reference(name: str, ref: Any) -> str:
    """The value a reference names; SpecError (naming environment.<name>, never the value) if it cannot be read."""
    where = f"environment.{name}"
    if hasattr(ref, "variable"):
        # lazy: Airflow, which jobspec/ and launch/ never import at module level (the SDK's local mode)
        from airflow.sdk import Variable

        try:
            return str(Variable.get(ref.variable))
        except Exception as err:  # not found, or the secrets backend refused
            raise SpecError(where, f"Airflow Variable {ref.variable!r} cannot be read ({type(err).__name__}); "
                            "create it (Admin > Variables, `airflow variables set`, a secrets backend)") from None
    # lazy: Airflow, which jobspec/ and launch/ never import at module level (the SDK's local mode)
    from airflow.providers.common.compat.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(ref.connection)
    except Exception as err:
        raise SpecError(where, f"Airflow connection {ref.connection!r} cannot be read ({type(err).__name__}); "
                        "create it or fix the id") from None
    value = _connection_field(conn, ref.field)
    if value in (None, ""):
        raise SpecError(where, f"connection {ref.connection!r} has no {ref.field}; set it or name another field")
    return value


def resolve_references(refs: Mapping[str, Any]) -> dict[str, str]:
    """name -> value of every reference, each registered with the secrets masker before anything can log it."""
    # lazy: Airflow, which jobspec/ and launch/ never import at module level (the SDK's local mode)
    from airflow.sdk.log import mask_secret

    values = {}
    for name, ref in refs.items():
        value = read_reference(name, ref)
        mask_secret(value, name)
        values[name] = value
    return values


def redactor(values: Iterable[str]) -> Callable[[str], str]:
    """line -> the line with every value replaced by ***. Airflow's masker does this where it knows the values (the
    task's own process); lines that reach a log elsewhere (the triggerer's, `dags test`'s in-process log) go through
    this. Values under 4 characters are left alone: they would mask ordinary words."""
    secrets = sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)

    def redact(line: str) -> str:
        for secret in secrets:
            if secret in line:
                line = line.replace(secret, "***")
        return line

    return redact


def check_references(refs: Mapping[str, Any]) -> None:
    """The first task's check: every reference can be read (the values are masked, not kept)."""
    resolve_references(refs)

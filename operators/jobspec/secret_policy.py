"""Secret references are authorised, default deny: which secrets a job spec names, and whether the admin lets the runs
of its DAG reference them.

A spec names secrets that are not its own in five places: `environment` references ({"variable": key} and
{"connection": id, "field": ...}), `connections` (scheme -> connection id), docker `secret_variables` (variable ->
Variable key), kubernetes `secret_env` (variable -> "<Secret>/<key>") and kubernetes `env_from_secrets`. Whoever
triggers a DAG is untrusted, so each name must be allowed for the run's DAG by the admin's setting

    [training] secret_references = {"training_job": {"connections": ["ml_*"], "variables": ["wandb_*"],
                                                     "kubernetes_secrets": ["train-*"]},
                                    "*": {"variables": ["public_*"]}}

(DAG id pattern -> kind -> name patterns, shell-style and case-sensitive; a reference is allowed when an entry whose
DAG pattern matches the DAG id lists a matching name pattern for its kind). Empty, the default: nothing may be
referenced. The scheme default connections (aws_default, cos_default, oss_default, obs_default) that a job uses when
its spec names none are the admin's own configuration, not a reference; naming one for its own scheme is the same.

Applied twice: by the first task (operators/stages/validate_spec.py), the authoritative check, before any secret is
read or anything staged; and by the API server when a run is created (plugins/secret_reference_check.py), which also
asks Airflow's auth manager whether the triggering user may read each connection and Variable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Iterable, Mapping

from operators.jobspec.errors import SpecError
from operators.settings import secret_references
from operators.storage.location import (
    DEFAULT_CONNECTIONS,  # the object storage hook's defaults
)

CONNECTIONS, VARIABLES, KUBERNETES_SECRETS = "connections", "variables", "kubernetes_secrets"
KINDS = (CONNECTIONS, VARIABLES, KUBERNETES_SECRETS)
LABELS = {CONNECTIONS: "Airflow connection", VARIABLES: "Airflow Variable", KUBERNETES_SECRETS: "Kubernetes Secret"}
SETTING = "airflow.cfg [training] secret_references"
SHAPE = '{"<DAG id pattern>": {"connections": [...], "variables": [...], "kubernetes_secrets": [...]}}'


@dataclass(frozen=True)
class Reference:
    """One secret a spec names: where (`environment.DB_PASSWORD`), what kind, which name."""

    field: str
    kind: str
    name: str

    @property
    def label(self) -> str:
        return f"{LABELS[self.kind]} {self.name!r}"


def _default_connections() -> Mapping[str, str]:
    return DEFAULT_CONNECTIONS


def references(spec: Mapping[str, Any]) -> list[Reference]:
    """Every secret the spec names, in field order. Works on a raw spec (a run's conf, before validation) as on a
    validated one: a value of the wrong shape is left to spec validation, which refuses it."""
    found: list[Reference] = []
    environment = spec.get("environment")
    if isinstance(environment, Mapping):
        for var, value in environment.items():
            if isinstance(value, Mapping) and "variable" in value:  # the order operators/jobspec/model.py reads them in
                found.append(Reference(f"environment.{var}", VARIABLES, str(value["variable"])))
            elif isinstance(value, Mapping) and "connection" in value:
                found.append(Reference(f"environment.{var}", CONNECTIONS, str(value["connection"])))
    connections = spec.get("connections")
    if isinstance(connections, Mapping):
        defaults = _default_connections()
        for scheme, conn_id in connections.items():
            name = conn_id.strip() if isinstance(conn_id, str) else str(conn_id)  # the storage hook strips it too
            if name != defaults.get(scheme):
                found.append(Reference(f"connections.{scheme}", CONNECTIONS, name))
    docker = spec.get("docker")
    secret_variables = docker.get("secret_variables") if isinstance(docker, Mapping) else None
    if isinstance(secret_variables, Mapping):
        for var, key in secret_variables.items():
            found.append(Reference(f"docker.secret_variables.{var}", VARIABLES, str(key)))
    kubernetes = spec.get("kubernetes")
    if isinstance(kubernetes, Mapping):
        found.extend(_kubernetes_references(kubernetes))
    return found


def _kubernetes_references(options: Mapping[str, Any]) -> Iterable[Reference]:
    secret_env = options.get("secret_env")
    if isinstance(secret_env, Mapping):
        for var, ref in secret_env.items():  # "secret/key" or {"name": secret, "key": key}
            secret = ref.get("name") if isinstance(ref, Mapping) else ref.split("/", 1)[0] if isinstance(ref, str) \
                else None
            if secret is not None:
                yield Reference(f"kubernetes.secret_env.{var}", KUBERNETES_SECRETS, str(secret))
    env_from = options.get("env_from_secrets")
    names = env_from.split(",") if isinstance(env_from, str) else env_from if isinstance(env_from, list) else []
    for i, secret in enumerate(names):
        if str(secret).strip():
            yield Reference(f"kubernetes.env_from_secrets[{i}]", KUBERNETES_SECRETS, str(secret).strip())


@dataclass(frozen=True)
class SecretPolicy:
    """The parsed setting: (DAG id pattern, kind -> name patterns) entries. No entries: nothing is allowed."""

    entries: tuple[tuple[str, Mapping[str, tuple[str, ...]]], ...] = ()

    def allows(self, dag_id: str, ref: Reference) -> bool:
        return any(fnmatchcase(dag_id, dag_pattern) and any(fnmatchcase(ref.name, p) for p in kinds.get(ref.kind, ()))
                   for dag_pattern, kinds in self.entries)

    def refusal(self, dag_id: str, ref: Reference) -> str | None:
        """The one-line reason `ref` may not be used by runs of `dag_id` (without the field), or None."""
        if self.allows(dag_id, ref):
            return None
        return (f"{ref.label} may not be referenced by runs of DAG {dag_id!r}; an Airflow admin can allow it in "
                f"{SETTING}, or remove the reference")

    def check(self, dag_id: str, refs: Iterable[Reference]) -> None:
        """SpecError naming the field and the reference of the first one not allowed."""
        for ref in refs:
            reason = self.refusal(dag_id, ref)
            if reason:
                raise SpecError(ref.field, reason)


def _bad(problem: str) -> ValueError:
    return ValueError(f"{SETTING} {problem}; write it as {SHAPE}")


def parse_policy(raw: Any) -> SecretPolicy:
    """The setting's JSON value -> SecretPolicy; ValueError (one line naming the setting) when it is malformed."""
    if raw in (None, "", {}):
        return SecretPolicy()
    if not isinstance(raw, Mapping):
        raise _bad(f"must be a JSON object, got {type(raw).__name__}")
    entries = []
    for dag_pattern, kinds in raw.items():
        if not isinstance(kinds, Mapping):
            raise _bad(f"entry {dag_pattern!r} must be an object of kinds, got {json.dumps(kinds)[:60]}")
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise _bad(f"entry {dag_pattern!r} has unknown kind {unknown[0]!r} (kinds: {', '.join(KINDS)})")
        for kind, patterns in kinds.items():
            if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
                raise _bad(f"entry {dag_pattern!r}: {kind} must be a list of name patterns")
        entries.append((str(dag_pattern), {kind: tuple(patterns) for kind, patterns in kinds.items()}))
    return SecretPolicy(tuple(entries))


def load_policy() -> SecretPolicy:
    """The admin's policy from airflow.cfg (or AIRFLOW__TRAINING__SECRET_REFERENCES)."""

    return parse_policy(secret_references())

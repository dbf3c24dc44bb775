"""What the first task checks about the world, cheaply, before anything is staged, that is the spec's own: every URI
scheme has its connection, local paths exist / are writable and lie under the configured roots. (Each backend checks
its own options and that it answers: operators/launch/<backend>/checks.py; operators/launch/checks.py runs them all.)
A problem raises SpecError naming the spec field (one line, what to do); the validate stage fails the run at once.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from operators.jobspec.errors import SpecError
from operators.jobspec.local_paths import in_closed_area, in_platform_area
from operators.jobspec.model import SCHEMES, JobSpec
from operators.storage.location import DEFAULT_CONNECTIONS

PING_TIMEOUT_SECONDS = 5


def spec_uris(spec: JobSpec) -> Iterator[tuple[str, str]]:
    """(field, URI) of every location the job reads or writes."""
    yield "source_dir", spec.source_dir
    yield "output_path", spec.output_path
    if spec.checkpoint_path:
        yield "checkpoint_path", spec.checkpoint_path
    if spec.resume_from and spec.resume_from != "latest":
        yield "resume_from", spec.resume_from
    for channel, uri in spec.inputs.items():
        yield f"inputs.{channel}", uri


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0] if "://" in uri else "file"


def _local_path(uri: str) -> str:
    return os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)


def check_connections(spec: JobSpec) -> None:
    # lazy: Airflow, which jobspec/ and launch/ never import at module level (the SDK's local mode)
    from airflow.providers.common.compat.sdk import BaseHook

    wanted: dict[str, str] = {}
    for field, uri in spec_uris(spec):
        scheme = _scheme(uri)
        if scheme in SCHEMES:
            wanted.setdefault(scheme, field)
    for scheme in spec.connections:
        wanted.setdefault(scheme, f"connections.{scheme}")
    for scheme, field in wanted.items():
        conn_id = spec.connections.get(scheme, DEFAULT_CONNECTIONS[scheme])
        if scheme == "s3" and conn_id == DEFAULT_CONNECTIONS["s3"]:
            continue  # plain s3:// may use boto3's own credential chain (instance role, environment)
        try:
            conn = BaseHook.get_connection(conn_id)
        except Exception as err:  # AirflowNotFoundException, or a secrets backend error
            if "isn't defined" not in str(err) and type(err).__name__ != "AirflowNotFoundException":
                raise SpecError(field, f"cannot read Airflow connection '{conn_id}' ({type(err).__name__}); check "
                                "the secrets backend") from None
            raise SpecError(field, f"uses {scheme}:// but Airflow connection '{conn_id}' does not exist; create it "
                            f"(type aws, extra endpoint_url) or name another in connections.{scheme}") from None
        if conn.conn_type not in ("aws", "s3"):
            raise SpecError(field, f"connection '{conn_id}' for {scheme}:// is of type {conn.conn_type!r}; "
                            "object storage needs a connection of type aws")


def check_local_paths(spec: JobSpec, roots: tuple[str, ...], areas: dict | None = None) -> None:
    for field, uri in spec_uris(spec):
        if _scheme(uri) != "file":
            continue
        path = _local_path(uri)
        if in_platform_area(field, path, areas):
            continue  # the SDK's uploaded code or its default models directory, in the workspace
        if field == "source_dir" and in_closed_area(path, areas):
            raise SpecError(field, f"{path} is code another user uploaded (or was staged without a triggering user); "
                            "upload your own with the SDK, or name object storage or a path under local_roots")
        if roots and not any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots):
            raise SpecError(field, f"{path} is outside the local roots this Airflow allows ({', '.join(roots)}); "
                            "use a path under one of them or object storage ([training] local_roots)")
        if field in ("output_path", "checkpoint_path"):
            existing = path
            while not os.path.exists(existing):
                existing = os.path.dirname(existing)
            if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
                raise SpecError(field, f"{path} is not writable by the Airflow worker ({existing} is not a writable "
                                "directory); give a writable path")
        elif not os.path.exists(path):
            raise SpecError(field, f"{path} does not exist on the Airflow worker; check the path")


def short_error(err: Any) -> str:
    """An exception in one line of at most 160 characters (for a check's refusal)."""
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."

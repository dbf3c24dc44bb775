"""Local-path URIs of a job spec never name Airflow's own files or the training workspace.

spec_checks.check_local_paths keeps local paths under [training] local_roots. A root set wide (/tmp, /, or left
empty = anywhere) must not reopen the hole the local backend had: `inputs: {"x": "<AIRFLOW_HOME>/airflow.cfg"}`
handed Airflow's config (or its DB, or another job's root) to user code as a channel. So whatever the roots, a local
path that is, lies inside or holds Airflow's config, SQLite DB, secrets file, the simple auth manager's password file,
the logs or the workspace is refused in the first task. Symlinks are resolved first.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from operators.jobspec.errors import SpecError
from operators.settings import get_str
from operators.storage.location import parse_uri

URI_FIELDS = ("source_dir", "output_path", "checkpoint_path", "resume_from")


def _local_path(uri: str) -> str | None:
    loc = parse_uri(uri)
    return os.path.realpath(loc.local_path) if loc.is_local and loc.local_path else None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def in_platform_area(field: str, path: str, areas: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether `path` of `field` lies in a workspace area the platform itself fills for that field: the SDK's
    uploaded code archives (source_dir) and its default models directory (output_path, resume_from)."""
    real = os.path.realpath(path)
    return any(field in fields and _under(real, os.path.realpath(top)) for top, fields in (areas or {}).items())


def _configured(section: str, key: str, fallback: str) -> str:
    try:  # operators/settings.py's reader: Airflow's conf, or a data-plane step's environment without Airflow
        return get_str(section, key, fallback) or fallback
    except Exception:  # noqa: BLE001 - no Airflow config here: its default place
        return fallback


def in_closed_area(path: str, areas: Mapping[str, tuple[str, ...]] | None) -> bool:
    """Whether `path` lies in an area no spec field may name (an area with no fields: other users' staged code)."""
    real = os.path.realpath(path)
    return any(not fields and _under(real, os.path.realpath(top)) for top, fields in (areas or {}).items())


def airflow_private_paths(workspace: str) -> list[str]:
    """Airflow's own files on this worker (config, DB, secrets, the simple auth manager's passwords, task and
    component logs), and the workspace (job roots and the cache)."""
    home = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
    paths = [os.environ.get("AIRFLOW_CONFIG") or os.path.join(home, "airflow.cfg"),
             os.path.join(home, "airflow.db"), os.path.join(home, "airflow-secrets.env"),
             os.path.join(home, "webserver_config.py"),
             os.path.join(home, "simple_auth_manager_passwords.json.generated"),
             _configured("core", "simple_auth_manager_passwords_file",
                         os.path.join(home, "simple_auth_manager_passwords.json.generated")),
             os.path.join(home, "logs"), _configured("logging", "base_log_folder", os.path.join(home, "logs")),
             workspace]
    return list(dict.fromkeys(os.path.realpath(p) for p in paths))


def spec_local_uris(spec: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(field, uri) of every storage URI of a validated spec (as JobSpec.to_dict())."""
    for name in URI_FIELDS:
        value = spec.get(name)
        if value and value != "latest":
            yield name, value
    for channel, uri in (spec.get("inputs") or {}).items():
        yield f"inputs.{channel}", uri


def check_private_paths(spec: Mapping[str, Any], private: Iterable[str],
                        areas: Mapping[str, tuple[str, ...]] | None = None) -> None:
    """Raise SpecError (one line naming the field) for a local path that is, is in or holds one of `private`,
    except where `areas` (see in_platform_area) allow that field."""
    private = tuple(private)
    for name, uri in spec_local_uris(spec):
        path = _local_path(uri)
        if path is None or in_platform_area(name, path, areas):
            continue
        for own in private:
            if _under(path, own) or _under(own, path):
                raise SpecError(name, f"local path {uri} is or holds Airflow's own files or the training workspace "
                                      f"({own}); use a directory of its own under [training] local_roots")

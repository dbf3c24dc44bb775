"""Which spec the view acts on, and which of its local paths it may serve.

Only the spec the first task validated (validate_spec's XCom) names files, connections or the job root: a run whose
spec was refused has no artifacts, whatever its raw conf says (its output_path could name another DAG's outputs, its
`connections` any connection). And even a validated spec's local paths are served only while they are still inside
what this Airflow allows a job ([training] local_roots, the SDK's models directory) and outside Airflow's own files
and the workspace: the settings may have changed since the run, and a path a job once wrote is no licence to read
whatever lies there now.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from fastapi import HTTPException

NOT_VALIDATED = ("the job's spec was not validated (validate_spec failed or has not run yet), so the view serves "
                 "nothing it names; fix the spec and trigger the DAG again")
SERVED_FIELDS = ("output_path", "checkpoint_path")


def require_validated(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    if not spec:
        raise HTTPException(409, NOT_VALIDATED)
    return spec


def check_served_paths(spec: Mapping[str, Any]) -> None:
    """403, one line, for a local path of the spec outside what this Airflow lets jobs use."""
    from operators.storage.location import parse_uri
    from operators.spec.local_paths import airflow_private_paths, check_private_paths, in_platform_area
    from operators.settings import training_settings
    from operators.spec.errors import SpecError

    settings = training_settings()
    areas = settings.platform_areas
    for field in SERVED_FIELDS:
        uri = spec.get(field)
        if not uri:
            continue
        loc = parse_uri(str(uri))
        if not loc.is_local or not loc.local_path:
            continue
        path = os.path.realpath(loc.local_path)
        roots = settings.local_roots
        if not in_platform_area(field, path, areas) and roots and not any(
                path == os.path.realpath(r) or path.startswith(os.path.realpath(r).rstrip("/") + "/") for r in roots):
            raise HTTPException(403, f"{field} {uri} is outside [training] local_roots ({', '.join(roots)}); the "
                                     "view serves no file there")
        try:
            check_private_paths({field: str(uri)}, airflow_private_paths(settings.workspace), areas)
        except SpecError as err:
            raise HTTPException(403, f"{err}; the view serves no file there") from None

"""Which spec the view acts on, and which of its local paths it may serve.

Only the spec the first task validated (validate_spec's XCom) names files, connections or the job root: a run whose
spec was refused has no artifacts, whatever its raw conf says (its output_path could name another DAG's outputs, its
`connections` any connection). And even a validated spec's local paths are served only while they are still inside
what this Airflow allows a job ([training] local_roots, the SDK's models directory) and outside Airflow's own files
and the workspace: the settings may have changed since the run, and a path a job once wrote is no licence to read
whatever lies there now.

Nor does a job_name make a job root this run's: a run that names a job another run holds is refused by the lease
(operators/state/lease.py), but its validated spec still names that job root and output prefix. Every read of a job's
files first asks the lease's owner claim (`belongs_to_run`); another run's files are answered as if this job had none
yet, with OTHER_RUN where the user would otherwise see nothing.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from fastapi import HTTPException

from operators.jobspec.errors import SpecError
from operators.jobspec.local_paths import airflow_private_paths, check_private_paths, in_platform_area
from operators.settings import training_settings
from operators.stage_names import STAGES
from operators.state.job_state import state_dir
from operators.state.lease import holder
from operators.storage.location import parse_uri

NOT_VALIDATED = ("the job's spec was not validated (validate_spec failed or has not run yet), so the view serves "
                 "nothing it names; fix the spec and trigger the DAG again")
SERVED_FIELDS = ("output_path", "checkpoint_path")
OTHER_RUN = ("this job name belongs to another run: its metrics, files and failure text are that run's and are not "
             "shown here; give this run a job_name of its own")
# The stages after validate_spec: each claims the job root first (operators/stages/base.py claim_job), so one that
# succeeded held it.
CLAIMING_STAGES = STAGES[1:]


def require_validated(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    if not spec:
        raise HTTPException(409, NOT_VALIDATED)
    return spec


def check_served_paths(spec: Mapping[str, Any]) -> None:
    """403, one line, for a local path of the spec outside what this Airflow lets jobs use."""
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


THIS_RUN, NOT_YET, ANOTHER_RUN = "this run", "not yet", "another run"


def files_owner(job) -> str:
    """Whose are the job root and output the job's spec names: THIS_RUN when the lease's owner claim names this run,
    or, where none is left (retention removes it with the job root), when this run's own stages got past the lease;
    ANOTHER_RUN when the claim names another; NOT_YET while nobody holds it (nothing written there for this run)."""
    name = job.spec.get("job_name")
    if not name:
        return NOT_YET  # no validated spec: no files
    try:
        owner = holder(state_dir(training_settings().workspace, name))
    except ValueError:  # a name no state directory can have: nothing was ever claimed under it
        return NOT_YET
    if owner is not None:
        return THIS_RUN if owner == (job.dag_id, job.run_id) else ANOTHER_RUN
    return THIS_RUN if any(job.state(stage) == "success" for stage in CLAIMING_STAGES) else NOT_YET


def require_own_files(job) -> None:
    """404 unless the job's files are this run's: OTHER_RUN when they are another's."""
    owner = files_owner(job)
    if owner == ANOTHER_RUN:
        raise HTTPException(404, OTHER_RUN)
    if owner == NOT_YET:
        raise HTTPException(404, "this job has written no files yet")

"""One run per job_name: the first DAG run that stages a job owns its job root (and so its published artifacts).

A second run naming the same job_name while the first runs would kill the first's training (the local launcher
stops what an "earlier attempt" left running) and overwrite its model.tar.gz: lost data. So the first stage that
touches the job root claims it with `owner.json` ({dag_id, run_id}) in the job's state directory (outside the job
root, where user code cannot forge or remove it: operators/state/job_state.py), created in one step (written to a private
name, then hard-linked into place: link fails if the file exists, so two runs racing cannot both win and nobody
reads half a file). Later stages check it; a retry of the same run (same run_id) passes and reattaches, any other run
fails fast with one line naming the job and the run that holds it. The claim lives as long as the job root
(retention removes both).
"""

from __future__ import annotations

import json
import os
import time

from operators.state.job_state import OWNER


class JobNameTaken(RuntimeError):
    pass


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def holder(state: str) -> tuple[str, str] | None:
    """(dag_id, run_id) of the run that holds the job whose state directory is `state`; None while nobody does."""
    owner = _read(os.path.join(state, OWNER))
    if isinstance(owner.get("dag_id"), str) and isinstance(owner.get("run_id"), str):
        return owner["dag_id"], owner["run_id"]
    return None


def claim(state: str, job_name: str, dag_id: str, run_id: str) -> bool:
    """Claim the job whose state directory is `state` for (dag_id, run_id); True when this call claimed it, False
    when the run already held it.

    Raises JobNameTaken when another run holds it.
    """
    os.makedirs(state, mode=0o700, exist_ok=True)
    path = os.path.join(state, OWNER)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
    with open(tmp, "w") as f:
        json.dump({"dag_id": dag_id, "run_id": run_id, "claimed_at": time.time()}, f)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    owner = _read(path)
    if owner.get("dag_id") == dag_id and owner.get("run_id") == run_id:
        return False
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(owner.get("claimed_at", 0)))
    raise JobNameTaken(
        f"job {job_name} belongs to run {owner.get('run_id', '?')} of DAG {owner.get('dag_id', '?')} (since {since}); "
        f"a job_name runs once and its model is never overwritten: give this run another job_name, or leave "
        f"job_name out to get a unique one")

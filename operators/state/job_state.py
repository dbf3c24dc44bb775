"""A job's platform state: the worker-only directory `<workspace>/state/<job_name>/`, and the names of its files.

The job root (`<workspace>/jobs/<job_name>/`) is written by the tenant's code: whatever the platform reads back from
there to decide what to kill, touch or skip is the tenant's to forge. So the platform's own records live here, beside
the job roots and never inside one: no backend mounts it (the local sandbox binds the job root and, read-only, the
lease; Docker binds the job root and the credentials file; pods mount the job root by subPath). Directories are
created 0700. Retention removes a job's state directory with its job root.
"""

from __future__ import annotations

import os

from operators.fs.directories import remove_tree

STATE_DIR = "state"  # under the workspace, beside jobs/ and cache/

# One home for the names of the files kept per job.
OWNER = "owner.json"  # which DAG run holds the job_name (operators/state/lease.py)
LAUNCH_PIDS = "launch-pids.json"  # the local launcher's processes, in host order
LAUNCH_DIR = "launch"  # the local launcher's per-host logs and exit statuses, and the lease
LEASE = "lease"  # in LAUNCH_DIR: touched by the launcher, read (read-only) by `train`
KUBERNETES_JOB = "kubernetes-job.json"  # when this job's Kubernetes Job was created
UPLOADED = "uploaded.json"  # what the upload stage already sent
ARTIFACTS = "artifacts"  # where the upload stage packs model.tar.gz and output.tar.gz
SECRETS = "secrets"  # the Docker backend's credentials file (bind-mounted read-only, file alone)


def state_root(workspace: str) -> str:
    return os.path.join(workspace, STATE_DIR)


def state_dir(workspace: str, job_name: str) -> str:
    """The job's state directory (not created; see ensure_state_dir)."""
    if not job_name or job_name in (".", "..") or "/" in job_name or "\0" in job_name:
        raise ValueError(f"job name {job_name!r} cannot name a state directory; use a DNS-1123 job_name")
    return os.path.join(state_root(workspace), job_name)


def ensure_state_dir(workspace: str, job_name: str, *sub: str) -> str:
    """Create (0700) and return the job's state directory, or a directory inside it."""
    path = state_root(workspace)
    os.makedirs(path, mode=0o700, exist_ok=True)
    for name in (job_name, *sub):  # one at a time: makedirs gives the mode to the last directory only
        path = os.path.join(path, name)
        os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def state_path(workspace: str, job_name: str, *names: str) -> str:
    return os.path.join(state_dir(workspace, job_name), *names)


def remove_state_dir(workspace: str, job_name: str) -> None:
    remove_tree(state_dir(workspace, job_name))

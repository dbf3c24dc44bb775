"""What every container backend (kubernetes, docker) shares about the inside of a training container: the layout
root the job root is mounted at, paths translated to it, the variables the launcher sets per host and channel names.
Pure functions, no I/O, no client. (The credential policy for a job's literal environment is the spec's:
operators/jobspec/credentials.py.)
"""

from __future__ import annotations

import posixpath
import re

from training_runtime.contract import CURRENT_HOST_ENV, ROOT_ENV
from training_runtime.layouts import CONTAINER_ROOTS

LAYOUT_ROOTS = dict(CONTAINER_ROOTS)
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
# Set by the launcher (or Kubernetes) for each host; overriding them would give every host the same identity.
RESERVED_ENV = frozenset({"JOB_COMPLETION_INDEX", CURRENT_HOST_ENV, ROOT_ENV})

def layout_root(layout: str) -> str:
    try:
        return LAYOUT_ROOTS[layout]
    except KeyError:
        known = ", ".join(LAYOUT_ROOTS)
        raise ValueError(f"layout {layout!r} is not one of {known}; set the spec's 'layout'") from None


def container_path(value: str, job_root: str, root: str) -> str:
    """A path the Airflow side wrote under the job root, as the container sees it (under the layout root)."""
    job_root = posixpath.normpath(job_root)
    if value == job_root:
        return root
    if value.startswith(job_root + "/"):
        return root + value[len(job_root):]
    return value

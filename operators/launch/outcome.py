"""The outcome markers of a job root (output/success, output/failure): the one place that reads and writes them
on the Airflow side. The runtime writes them inside the training; every layout keeps output/ at the root. The job
root is the tenant's, so every access goes through operators/fs/job_root.py (no link is followed, only a regular
file is read).
"""

from __future__ import annotations

import logging
import os

from operators.fs.job_root import JobRoot, UnsafePathError

log = logging.getLogger(__name__)

FAILURE_REASON_MAX_CHARS = 4000
FAILURE_READ_BYTES = 64 * 1024
MARKERS = ("success", "failure")


def marker_path(job_root: str, marker: str) -> str:
    return os.path.join(job_root, "output", marker)


def has_marker(job_root: str, marker: str) -> bool:
    """Whether output/<marker> is a regular file (a link or anything else there is no marker)."""
    return JobRoot(job_root).is_file(f"output/{marker}")


def read_failure_reason(job_root: str) -> str | None:
    """The runtime's (or the user's) output/failure of a job root, trimmed to its last 4000 characters; None when it
    is missing or is not a regular file (a link to another file is never read)."""
    try:
        text = JobRoot(job_root).read_text("output/failure", FAILURE_READ_BYTES).strip()
    except OSError as err:
        if not isinstance(err, FileNotFoundError):
            log.warning("Not reading the failure reason: %s", err)
        return None
    if len(text) > FAILURE_REASON_MAX_CHARS:
        text = "..." + text[-FAILURE_REASON_MAX_CHARS:]
    return text or None


def clear_outcome_markers(job_root: str) -> None:
    """A fresh start must not be judged by the success/failure files of an earlier try (a link there goes itself)."""
    root = JobRoot(job_root)
    for marker in MARKERS:
        root.remove(f"output/{marker}")


def record_failure(job_root: str, reason: str, *, replace: bool = False) -> None:
    """Mark the job failed: output/failure holds `reason` (kept if the runtime wrote one, unless `replace`);
    a success marker goes, so the failure cannot be mistaken for a success. The file is written under a new name and
    renamed into place: a link left at output/failure is replaced, never written through."""
    root = JobRoot(job_root)
    try:
        if replace or not root.is_file("output/failure"):  # else: the runtime's own reason is the better one
            root.write_text("output/failure", f"{reason}\n")
    except UnsafePathError as err:  # output/ itself is a link: the failure still fails the task, with its reason
        log.warning("Could not record the failure in the job root: %s", err)
    root.remove("output/success")

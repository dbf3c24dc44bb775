"""The outcome markers of a job root (output/success, output/failure): the one place that reads and writes them
on the Airflow side. The runtime writes them inside the training; every layout keeps output/ at the root.
"""

from __future__ import annotations

import os

FAILURE_REASON_MAX_CHARS = 4000
MARKERS = ("success", "failure")


def marker_path(job_root: str, marker: str) -> str:
    return os.path.join(job_root, "output", marker)


def read_failure_reason(job_root: str) -> str | None:
    """The runtime's (or the user's) output/failure of a job root, trimmed to its last 4000 characters."""
    try:
        with open(marker_path(job_root, "failure"), encoding="utf-8", errors="replace") as handle:
            text = handle.read(64 * 1024).strip()
    except OSError:
        return None
    if len(text) > FAILURE_REASON_MAX_CHARS:
        text = "..." + text[-FAILURE_REASON_MAX_CHARS:]
    return text or None


def clear_outcome_markers(job_root: str) -> None:
    """A fresh start must not be judged by the success/failure files of an earlier try."""
    for marker in MARKERS:
        try:
            os.remove(marker_path(job_root, marker))
        except FileNotFoundError:
            pass


def record_failure(job_root: str, reason: str, *, replace: bool = False) -> None:
    """Mark the job failed: output/failure holds `reason` (kept if the runtime wrote one, unless `replace`);
    a success marker goes, so the failure cannot be mistaken for a success."""
    failure = marker_path(job_root, "failure")
    if replace or not os.path.isfile(failure):  # else: the runtime's own reason is the better one
        os.makedirs(os.path.dirname(failure), exist_ok=True)
        with open(failure, "w") as handle:
            handle.write(f"{reason}\n")
    try:
        os.remove(marker_path(job_root, "success"))
    except FileNotFoundError:
        pass

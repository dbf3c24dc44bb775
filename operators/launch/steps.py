"""The protocol of a data-plane step, whichever backend runs it (Kubernetes: operators/launch/kubernetes/steps.py):
how the step's pod learns its work and how it reports the outcome back to the Airflow task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STEP_ENV = "TRAINING_STEP"  # the step's JSON payload (operators/stages/in_cluster.py reads it)
# What the step says back must fit a Kubernetes termination message (the kubelet keeps at most 4096 bytes).
OUTCOME_BYTES = 4096


@dataclass(frozen=True)
class StepOutcome:
    """What the step's code reported: a result, a skip, a failure no retry fixes, or an error a retry may fix."""

    result: Any = None
    skipped: str | None = None
    failed: str | None = None
    error: str | None = None


class StepError(RuntimeError):
    """A step could not run (one line: what, where, what to do); `permanent`: no retry of the task can fix it (the
    platform image cannot be pulled, the storage Secret is missing)."""

    def __init__(self, message: str, *, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent

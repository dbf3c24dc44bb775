"""The protocol of a data-plane step, whichever backend runs it (Kubernetes: operators/launch/kubernetes/steps.py):
how the step's pod learns its work and how it reports the outcome back to the Airflow task."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

# the step's JSON payload (operators/stages/in_cluster.py reads it), and the checkpoint sync's configuration (below):
# their home is operators/step_process.py, which the layers below launch/ read too
from operators.step_process import CHECKPOINT_SYNC_ENV as CHECKPOINT_SYNC_ENV
from operators.step_process import STEP_ENV as STEP_ENV

# What the step says back must fit a Kubernetes termination message (the kubelet keeps at most 4096 bytes).
OUTCOME_BYTES = 4096
TERMINATION_LOG = "/dev/termination-log"

# The checkpoint sync's pod (operators/engine/checkpoint_sync.py), which runs for the training's lifetime beside it:
# its configuration is in CHECKPOINT_SYNC_ENV; the file it writes once the checkpoints already there (restored) are
# known is its readiness probe, which the launcher waits for before it creates the training (else the training's first
# checkpoint could be taken for a restored one and never uploaded) ...
CHECKPOINT_SYNC_READY_FILE = "/tmp/checkpoint-sync-ready"
# ... and the line it logs once its last pass, after the training ended, has uploaded everything.
CHECKPOINT_SYNC_DONE = "checkpoint sync: the last pass is done"


def report_outcome(message: dict[str, Any]) -> None:
    """Say the step's outcome ({"result"}, {"skip"}, {"fail"} or {"error"}) where the kubelet keeps it for the worker:
    the container's termination message, written by the platform's code only (no log line of a job's can forge it)."""
    text = json.dumps(message, separators=(",", ":"), default=str)
    if len(text.encode()) > OUTCOME_BYTES:
        text = json.dumps({"error": f"the step's result is {len(text.encode())} bytes, more than a termination "
                                    f"message holds ({OUTCOME_BYTES})"})
    with open(os.environ.get("TRAINING_TERMINATION_LOG", TERMINATION_LOG), "w") as handle:
        handle.write(text)


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

"""The SDK's errors: one line a person can act on."""

from __future__ import annotations


class TrainingSdkError(Exception):
    """Anything the SDK refuses or cannot do (configuration, connection, bad input)."""


class SpecValidationError(TrainingSdkError, ValueError):
    """The job spec does not satisfy the DAG's Params schema; raised before anything is uploaded."""

    def __init__(self, field: str, problem: str):
        self.field = field
        super().__init__(f"job spec field '{field}': {problem}")


class TrainingJobError(TrainingSdkError):
    """The training job ended without success; `reason` is the platform's failure reason."""

    def __init__(self, job_name: str, status: str, reason: str | None):
        self.job_name = job_name
        self.status = status
        self.reason = reason or "no reason was recorded"
        # the launch stage's own message already says "training job <name> failed (<class>): ..."
        said = self.reason.startswith(f"training job {job_name} ")
        super().__init__(self.reason if said else f"training job {job_name} {status.lower()}: {self.reason}")


class IgnoredArgumentWarning(UserWarning):
    """An argument of SageMaker's or PAI's Estimator that changes nothing here (the IAM role, a cloud machine type,
    spot capacity): accepted so ported code runs, and named once in this warning."""

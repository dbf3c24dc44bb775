"""What validate_spec checks of a local job, cheaply, before anything is staged (operators/launch/checks.py runs it):
it asks for no more memory, CPU or GPUs per host than the admin allows and this worker has (limits.py,
operators/launch/worker_slots.py); the launch checks again where it runs."""

from __future__ import annotations

from typing import Any

from operators.jobspec.checks import check_connections
from operators.jobspec.errors import SpecError
from operators.jobspec.model import JobSpec
from operators.launch.local.limits import LimitError, check_resources
from operators.launch.worker_slots import gpu_devices
from operators.settings import training_settings


def check_options(spec: JobSpec, settings: Any = None) -> None:
    if settings is None:
        settings = training_settings()
    resources = spec.resources.model_dump(exclude_none=True)
    try:
        check_resources(resources, settings)
    except LimitError as err:
        raise SpecError(err.field, err.problem) from None
    wanted, have = int(resources.get("gpu") or 0), len(gpu_devices(settings.local_gpu_devices))
    if wanted > have:
        raise SpecError("resources.gpu", f"{wanted} GPU(s) asked for, but the local backend's worker has {have} "
                        "([training] local_gpu_devices); ask for fewer or use the kubernetes backend")


def check_storage(spec: JobSpec) -> None:
    """The worker moves the job's bytes: every scheme's Airflow connection exists."""
    check_connections(spec)


def check_reachable() -> None:
    """The worker itself: nothing to reach."""

"""Every cheap check of the world validate_spec makes before anything is staged, in the order a user would fix them:
the spec's own (local paths, secret references: operators/jobspec/) and its backend's (options, where its bytes
move from and with which connections, then whether it answers: operators/launch/<backend>/checks.py, found through the registry, so no backend is imported
here and a worker loads only the backend a job uses)."""

from __future__ import annotations

from operators.jobspec.checks import check_local_paths
from operators.jobspec.model import JobSpec
from operators.jobspec.secret_refs import check_references
from operators.launch.disk_cap import check_disk_request
from operators.launch.registry import backend_checks
from operators.settings import training_settings


def check_world(spec: JobSpec, local_roots: tuple[str, ...] = (), areas: dict | None = None) -> None:
    backend = backend_checks(spec.backend)
    check_local_paths(spec, local_roots, areas)
    check_disk_request(spec.resources.disk, training_settings().job_disk_limit)
    backend.check_options(spec)
    backend.check_storage(spec)
    check_references(spec.secret_references())
    backend.check_reachable()

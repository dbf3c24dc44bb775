"""What validate_spec checks of a docker job, cheaply, before anything is staged (operators/launch/checks.py runs it):
the Docker engine answers. (Its `user` and `host_workspace` are checked by its options model: options.py.)"""

from __future__ import annotations

from operators.jobspec.checks import (
    PING_TIMEOUT_SECONDS,
    check_connections,
    short_error,
)
from operators.jobspec.errors import SpecError
from operators.jobspec.model import JobSpec
from operators.launch.docker.settings import docker_settings


def check_options(spec: JobSpec) -> None:
    """Nothing beyond its options model's checks (options.py), made when the spec is validated."""


def check_storage(spec: JobSpec) -> None:
    """The worker moves the job's bytes: every scheme's Airflow connection exists."""
    check_connections(spec)


def check_reachable() -> None:
    url = docker_settings().docker_url
    try:
        import docker  # lazy: the Docker SDK, loaded only when a docker spec's engine is pinged

        client = docker.APIClient(base_url=url, version="auto", timeout=PING_TIMEOUT_SECONDS)
        client.ping()
        client.close()
    except Exception as err:
        raise SpecError("backend", f"is docker but the Docker engine at {url} does not answer ({short_error(err)}); "
                        "start it or set [training.docker] docker_url") from None

"""airflow.cfg [training.docker] (overridable by AIRFLOW__TRAINING_DOCKER__<KEY> variables): the Docker backend's
settings, read with the shared typed getters of operators/settings.py."""

from __future__ import annotations

import os
from dataclasses import dataclass

from operators.settings import get_int, get_str


@dataclass(frozen=True)
class DockerSettings:
    docker_url: str = "unix://var/run/docker.sock"
    docker_conn_id: str = ""  # a docker connection (registry login); "" = none
    host_workspace: str = ""  # the workspace's path on the engine's host when the worker sees it elsewhere
    pids_limit: int = 4096  # processes and threads per training container (a fork bomb stops there); 0 = no limit


def docker_settings() -> DockerSettings:
    s = "training.docker"
    return DockerSettings(
        docker_url=get_str(s, "docker_url", "unix://var/run/docker.sock") or "unix://var/run/docker.sock",
        docker_conn_id=get_str(s, "docker_conn_id", "").strip(),
        host_workspace=_host_workspace(get_str(s, "host_workspace", "").strip()),
        pids_limit=get_int(s, "pids_limit", 4096, minimum=0),
    )


def _host_workspace(value: str) -> str:
    if value and not os.path.isabs(value):
        raise ValueError(f"airflow.cfg [training.docker] host_workspace must be an absolute path, got {value!r}")
    return value.rstrip("/") or value

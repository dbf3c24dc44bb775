"""The real Docker engine for tests: `make test` starts one (docker/ensure-engine.sh) and builds the images
(`make images`). Without an engine the tests skip and say why; with an engine a missing image is a failure
(the machine can build it), not a skip."""

from __future__ import annotations

import os
import subprocess

import pytest

DOCKER_URL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
TRAINING_IMAGE = os.environ.get("TRAINING_E2E_IMAGE", "training-base:latest")
TORCH_IMAGE = os.environ.get("TRAINING_E2E_TORCH_IMAGE", "training-torch:latest")
AIRFLOW_IMAGE = os.environ.get("TRAINING_E2E_AIRFLOW_IMAGE", "training-airflow:latest")


def engine():
    """A docker.APIClient on the engine, or skip the test saying why there is none."""
    import docker

    try:
        client = docker.APIClient(base_url=DOCKER_URL, version="auto", timeout=60)
        client.ping()
    except Exception as err:  # no socket, refused, not root...
        pytest.skip(
            f"no Docker engine answers at {DOCKER_URL} ({type(err).__name__}); `make test` starts one when run "
            "as root (docker/ensure-engine.sh)"
        )
    return client


def require_image(client, image: str) -> None:
    import docker.errors

    try:
        client.inspect_image(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {image} is not on the engine; build it with `make images`")


def docker_run(image: str, *args: str, user: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`docker run --rm IMAGE ARGS` through the CLI, as a user would."""
    command = ["docker", "run", "--rm", "--network", "none"]
    if user:
        command += ["--user", user]
    return subprocess.run(
        [*command, image, *args], capture_output=True, text=True, timeout=timeout
    )

"""Per-job Docker options: the spec's `docker` section, whose model (DockerOptions) validates it in the first task
through the launch registry; the launcher reads them (operators/launch/docker/launcher.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from operators.jobspec.parts import Count, Strict, json_text, spec_error
from operators.launch.docker.users import root_part


class DockerOptions(Strict):
    """Per-job Docker options."""

    user: str | None = Field(None, description="uid:gid (or a user name of the image) the containers run as, never "
                             "root; empty: the image's non-root user (the worker's uid:gid if it is not root).")
    shm_size: str | None = Field(None, description="Size of /dev/shm, e.g. 2Gi; empty: 1Gi.")
    keep_containers: bool = Field(False, description="Keep containers and network after the job (debugging).")
    host_workspace: str | None = Field(None, description="The workspace's path on the engine's host, when the "
                                       "worker sees it elsewhere (a worker in a container).")
    image_pull_grace_seconds: Count | None = Field(None, ge=0)
    poll_interval: float | None = Field(None, gt=0, le=300)
    stop_timeout: Count | None = Field(None, ge=0, le=3600)
    secret_variables: dict[str, str] | None = Field(
        None, description='Variable -> Airflow Variable key, read at launch into a read-only file '
        '(e.g. {"WANDB_API_KEY": "wandb_api_key"}).')

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        part = root_part(value)
        if part:
            raise spec_error(f"is {json_text(value)}, whose {part} is root: training containers never run as root; "
                             "give a non-root uid:gid (e.g. 1000:1000), or leave it out to use the image's user")
        return value.strip()

    @field_validator("host_workspace")
    @classmethod
    def _host_workspace(cls, value: str | None) -> str | None:
        if value:
            raise spec_error("is an admin setting (what the Docker engine bind-mounts): remove it from the spec; an "
                             "admin sets [training.docker] host_workspace in airflow.cfg")
        return None

    def launch_options(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude_defaults=True)


# The option names a launch accepts: the model's fields, never typed twice.
OPTION_KEYS = tuple(DockerOptions.model_fields)

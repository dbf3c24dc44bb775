"""Who a Docker training container runs as, the job root it may write, and the credentials it reads.

The user (never root): the job's docker option `user` (uid[:gid] or a name in the image); else, when the worker runs
as root, the image's own USER, or DEFAULT_USER when the image's is root or unset, and the job root is given to that
user (chown) so `train` can write output/, the model and a requirements venv there; else (a non-root worker) the
worker's uid:gid, so the job root's files stay the worker's and nothing needs changing hands. A user with group root
("1000:0"), or whose uid or primary group is 0 in the image, is refused at launch, from the option or the image alike.

Credentials (`secret_variables`: environment variable -> Airflow Variable key): read through the Task SDK's
Variable (any secrets backend; Airflow masks the values in task logs), written as JSON to
`secrets/env.json` in the job's state directory (operators/state/job_state.py; directory 0700, file 0400 and owned by the
container's user), outside the job root (which is uploaded and written by the job), the file alone bind-mounted
read-only and loaded by the container's command before `train` starts
(docker_containers.ENV_FILE_WRAPPER). The file is deleted when the job ends or is stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Mapping

from operators.fs.job_root import JobRoot
from operators.launch.docker.users import root_part
from operators.state.job_state import SECRETS, state_path

DEFAULT_USER = "1000:1000"  # the training image's `ml` user (docker/training.Dockerfile)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_root(user: str | None) -> bool:
    """Root by number after parsing ("", "0", "00", "root"): users.py."""
    return root_part(user or "") == "user"


def numeric_ids(user: str) -> tuple[int, int | None] | None:
    """'1000:1000' -> (1000, 1000), '1000' -> (1000, None); None for names."""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        return None
    return int(uid), int(gid) if gid else None


def worker_is_root() -> bool:
    return os.geteuid() == 0


def give_job_root(path: str, uid: int, gid: int | None) -> int:
    """chown -R the job root to the container's user (operators/fs/job_root.py: links themselves, never their
    targets); returns how many entries changed hands, none on a retry."""
    return JobRoot(path).give_to(uid, gid)


def secret_values(mapping: Mapping[str, str] | None) -> dict[str, str]:
    """The values of the `secret_variables` option, read now (at launch), never stored in the spec or XCom."""
    if not mapping:
        return {}
    if not isinstance(mapping, Mapping):
        raise ValueError('docker option secret_variables must be an object: {"ENV_NAME": "<Airflow Variable key>"}')
    # lazy: Airflow; launch/ imports it at module level only in its hooks (test_import_graph)
    from airflow.sdk import Variable

    values = {}
    for name, key in mapping.items():
        if not _ENV_NAME.match(str(name)):
            raise ValueError(
                f"secret_variables: {name!r} is not an environment variable name; use [A-Za-z_][A-Za-z0-9_]*"
            )
        try:
            values[str(name)] = str(Variable.get(str(key)))
        except Exception as err:  # not found, or the secrets backend refused
            raise ValueError(
                f"secret_variables.{name}: cannot read Airflow Variable {key!r} ({type(err).__name__}); create it "
                "(UI Admin > Variables, `airflow variables set`, or a secrets backend) or fix the key"
            ) from None
    return values


def secrets_dir(workspace: str, job_name: str) -> str:
    return state_path(workspace, job_name, SECRETS)


def write_secrets(directory: str, values: Mapping[str, str], uid: int | None, gid: int | None) -> str:
    """The credentials file for the job's containers; readable by their user only."""
    for path in (os.path.dirname(os.path.dirname(directory)), os.path.dirname(directory), directory):
        os.makedirs(path, mode=0o700, exist_ok=True)
    path = os.path.join(directory, "env.json")
    fd = os.open(path + ".partial", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
    try:
        os.write(fd, json.dumps(dict(values)).encode())
    finally:
        os.close(fd)
    if uid is not None and worker_is_root():
        os.chown(path + ".partial", uid, -1 if gid is None else gid)
    os.replace(path + ".partial", path)
    return path


def remove_secrets(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)

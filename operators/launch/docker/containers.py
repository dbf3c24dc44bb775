"""The Docker backend's containers as data (pure functions, no engine): names, labels, bind mounts and the
Engine API body (POST /containers/create) of each host's container, and the fixed addresses of a job's hosts.

Host i is the container `<name>-<i>` (name = the job's resource name, the same on every try), on the bridge
network `<name>` at a fixed address, with every host in its /etc/hosts. It runs `train --root <layout root>
--current-host <name>-<i>` under the image's entrypoint; with credentials, through :data:`ENV_FILE_WRAPPER`,
which loads the mounted credentials file into the environment and execs `train`, so no value is ever part of
the container's configuration (what `docker inspect` shows).
"""

from __future__ import annotations

import ipaddress
import os
from decimal import Decimal
from typing import Any, Sequence

from operators.launch.container_env import CHANNEL_NAME, RESERVED_ENV, container_path, layout_root
from operators.jobspec.credentials import looks_like_secret
from operators.launch.base import LaunchRequest
from operators.launch.names import JOB_LABEL, ORIGINAL_NAME_ANNOTATION
from operators.launch.names import resource_name
from operators.quantities import parse_quantity
from training_runtime.contract import ROOT_ENV

SECRETS_FILE = "/run/training-secrets/env.json"  # where a container finds its credentials file (read-only)
# argv: FILE COMMAND... ; a JSON object of variables -> values, loaded before COMMAND replaces this process.
ENV_FILE_WRAPPER = (
    "import json, os, sys\n"
    "with open(sys.argv[1]) as f: os.environ.update(json.load(f))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])"
)

INDEX_LABEL = "airflow-training-jobs/host-index"
def quantity(value: Any, field_name: str) -> Decimal:
    """A Kubernetes quantity ('16Gi', '500m', 2) as a number (operators/quantities.py), so one spec serves both
    backends."""
    try:
        return parse_quantity(value)
    except ValueError:
        raise ValueError(f"resources.{field_name} is {value!r}; write e.g. cpu: 2 or '500m', memory: '8Gi'") from None


def container_name(job_name: str, index: int) -> str:
    return f"{resource_name(job_name)}-{index}"


def job_labels(request: LaunchRequest, index: int | None = None) -> dict[str, str]:
    labels = {JOB_LABEL: resource_name(request.job_name), ORIGINAL_NAME_ANNOTATION: request.job_name}
    if index is not None:
        labels[INDEX_LABEL] = str(index)
    return labels


def bind_source(path: str, request: LaunchRequest, host_workspace: str | None, what: str) -> str:
    """Where the engine finds `path`: the worker's path, or the same place under host_workspace."""
    workspace = os.path.normpath(request.workspace)
    path = os.path.normpath(path)
    if not host_workspace:
        return path
    relative = os.path.relpath(path, workspace)
    if relative.startswith(".."):
        raise ValueError(f"{what} {path} is not inside the workspace {workspace}; keep job roots and the cache in it")
    return os.path.join(host_workspace, relative)


def container_configs(
    request: LaunchRequest,
    *,
    image: str,
    user: str,
    shm_size: str | None = "1Gi",
    host_workspace: str | None = None,
    addresses: Sequence[str] | None = None,
    secrets_file: str | None = None,
    pids_limit: int = 0,
    gpu_ids: Sequence[Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """The Engine API body (POST /containers/create) of each host's container, in host order.

    addresses: each host's fixed address on the job's network (see :func:`job_addresses`); every container's
    /etc/hosts then lists all hosts. secrets_file: the job's credentials file on the worker, mounted read-only
    and loaded by :data:`ENV_FILE_WRAPPER` before `train` starts. pids_limit: the most processes and threads a
    container may hold (`[training.docker] pids_limit`); 0: no limit. gpu_ids: each host's own GPUs (NVIDIA
    indices leased on the worker, operators/launch/worker_slots.py); None: `resources.gpu` of any GPUs the engine picks.
    """
    if not image:
        raise ValueError("image_uri is empty; set the spec's image_uri or [training] default_image")
    if request.instance_count < 1:
        raise ValueError(f"instance_count is {request.instance_count}; give at least 1 host")
    root = layout_root(request.layout)
    env = []
    for key, value in request.env.items():
        if key in RESERVED_ENV:
            raise ValueError(f"env {key} is set by the launcher for each host; remove it from the job's env")
        if looks_like_secret(key, str(value)):
            raise ValueError(
                f"env {key} looks like a credential, and the docker backend puts no literal credentials into "
                "containers (docker inspect shows them); store it in an Airflow Variable and pass the docker option "
                f'secret_variables {{"{key}": "<variable key>"}} instead'
            )
        env.append(f"{key}={container_path(str(value), request.job_root, root)}")
    binds = [f"{bind_source(request.job_root, request, host_workspace, 'job root')}:{root}:rw"]
    for channel, entry in sorted(request.channel_entries.items()):
        if not CHANNEL_NAME.match(channel):
            raise ValueError(f"channel name {channel!r} is not [A-Za-z0-9_-]+; rename the input channel")
        source = bind_source(entry, request, host_workspace, f"cache entry of channel {channel!r}")
        binds.append(f"{source}:{root}/input/data/{channel}:ro")
    command = ["train", "--root", root]
    if secrets_file:
        binds.append(f"{bind_source(secrets_file, request, host_workspace, 'credentials file')}:{SECRETS_FILE}:ro")
        command = ["python3", "-c", ENV_FILE_WRAPPER, SECRETS_FILE, *command]
    if addresses is not None and len(addresses) != request.instance_count:
        raise ValueError(f"{len(addresses)} addresses for {request.instance_count} hosts")
    resources = request.resources
    unknown = sorted(set(resources) - {"cpu", "memory", "gpu"})
    if unknown:
        raise ValueError(f"resources.{unknown[0]} is not a resource; use cpu, memory and gpu")
    host_config: dict[str, Any] = {
        "Binds": binds,
        "NetworkMode": resource_name(request.job_name),
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],  # (the "name:value" form is deprecated)
        "Init": True,  # reaps the training's zombie processes and forwards SIGTERM
    }
    if pids_limit:  # a fork bomb in the job's code stops there instead of exhausting the host's process table
        host_config["PidsLimit"] = int(pids_limit)
    if resources.get("cpu"):
        host_config["NanoCpus"] = int(quantity(resources["cpu"], "cpu") * 10**9)
    if resources.get("memory"):
        host_config["Memory"] = int(quantity(resources["memory"], "memory"))
    if request.disk_limit:  # no file the job writes outgrows the job root's disk cap (launch/disk_cap.py)
        host_config["Ulimits"] = [{"Name": "fsize", "Soft": int(request.disk_limit), "Hard": int(request.disk_limit)}]
    gpus = resources.get("gpu") or 0
    if isinstance(gpus, bool) or not str(gpus).isdigit():
        raise ValueError(f"resources.gpu is {gpus!r}; give a whole number of GPUs per host")
    if int(gpus) > 0:
        host_config["DeviceRequests"] = [{"Driver": "", "Count": int(gpus), "Capabilities": [["gpu"]]}]
    if shm_size:
        host_config["ShmSize"] = int(quantity(shm_size, "shm_size"))
    names = [container_name(request.job_name, index) for index in range(request.instance_count)]
    if addresses is not None:
        # Every host in every /etc/hosts from the start: a peer resolves before it has started and after it exited
        # (the engine's DNS only knows running containers).
        host_config["ExtraHosts"] = [f"{name}:{address}" for name, address in zip(names, addresses)]
    configs = []
    network = resource_name(request.job_name)
    if gpu_ids is not None and len(gpu_ids) != len(names):
        raise ValueError(f"GPUs for {len(gpu_ids)} hosts, {len(names)} hosts")
    for index, name in enumerate(names):
        endpoint: dict[str, Any] = {"Aliases": [name]}
        container_host_config = dict(host_config)
        if gpu_ids is not None and gpu_ids[index]:  # exactly these GPUs, none another job holds
            container_host_config["DeviceRequests"] = [{"Driver": "", "DeviceIDs": list(gpu_ids[index]),
                                                        "Capabilities": [["gpu"]]}]
        if addresses is not None:
            endpoint["IPAMConfig"] = {"IPv4Address": addresses[index]}
        configs.append(
            {
                "name": name,
                "Image": image,
                "Cmd": [*command, "--current-host", name],  # the image's ENTRYPOINT stays
                "Hostname": name,
                "User": user,
                "Env": [f"{ROOT_ENV}={root}", *env],
                "Labels": job_labels(request, index),
                "Tty": False,
                "HostConfig": container_host_config,
                "NetworkingConfig": {"EndpointsConfig": {network: endpoint}},
            }
        )
    return configs


def job_addresses(subnet: str, gateway: str | None, count: int) -> list[str]:
    """The first `count` addresses of the job network's subnet after its gateway, host order."""
    network = ipaddress.ip_network(subnet, strict=False)
    found = []
    for address in network.hosts():
        if str(address) == gateway:
            continue
        found.append(str(address))
        if len(found) == count:
            return found
    raise ValueError(f"the job network's subnet {subnet} has no room for {count} hosts")

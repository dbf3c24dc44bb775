"""The environment the user code sees: every platform family, whatever the layout.

All paths point into the actual job root (locally the job directory). Families:

TI-ONE, exactly as ``ti-containers`` 1.2.22 sets them
    TM_NUM_GPUS, TM_NUM_CPUS, TM_HPS (decoded values), TM_CURRENT_HOST, TM_HOSTS
    (JSON list), TM_CHANNELS (JSON list, file order), TM_CHANNEL_<NAME>,
    TM_MODEL_DIR, TM_OUTPUT_DATA_DIR, TM_INPUT_CONFIG_DIR, TM_NETWORK_INTERFACE_NAME,
    TM_USER_ENTRY_POINT, TM_LOG_LEVEL.
PAI
    PAI_HPS (typed JSON), PAI_HPS_<NAME> (upper-cased, characters outside
    [A-Za-z0-9_] -> ``_``; the string from hyperparameters.json), PAI_USER_ARGS
    (``--name value`` in file order, every element shell-quoted once),
    PAI_INPUT_<CHANNEL> (``input/data/<ch>/``, or the file for a channel listed in
    ``channel_files``), PAI_OUTPUT_MODEL, PAI_OUTPUT_CHECKPOINTS, PAI_CONFIG_DIR
    (directories with a trailing ``/`` as PAI documents them), PAI_WORKING_DIR.
SageMaker, exactly as ``sagemaker-training`` 5.1.4 sets them
    every SM_* of its Environment.to_env_vars(), SM_TRAINING_ENV, CURRENT_HOST,
    SAGEMAKER_JOB_NAME, SAGEMAKER_REGION (see :mod:`training_runtime.sagemaker`); in
    the sagemaker layout the code dir first on PYTHONPATH.
ModelArts
    MA_JOB_DIR (the directory holding the code directory), MA_NUM_HOSTS,
    MA_CURRENT_HOST, MA_CURRENT_IP, MA_NUM_GPUS, VC_TASK_INDEX (host index),
    MA_TASK_NAME (``worker``; ``ps`` for TensorFlow parameter servers); in the
    modelarts layout MA_JOB_DIR is also put first on PYTHONPATH.
Generic
    TRAINING_ROOT, TRAINING_JOB_NAME, TRAINING_LAYOUT, TRAINING_CURRENT_HOST,
    TRAINING_HOST_INDEX, TRAINING_NUM_HOSTS; PYTHONUNBUFFERED=1 unless set.

``TM_CHANNEL_<NAME>``, ``SM_CHANNEL_<NAME>`` and ``SM_HP_<NAME>`` use the name
upper-cased as the originals do (``SM_HP_BATCH-SIZE``); where that is not a
shell-friendly name the sanitised form (``SM_HP_BATCH_SIZE``) is set as well.
The distributed launcher variables come from :mod:`training_runtime.distributed`.
"""

import json
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass

from training_runtime import hyperparameters as hps
from training_runtime import sagemaker
from training_runtime.contract import CURRENT_HOST_ENV, ROOT_ENV

DEFAULT_LOG_LEVEL = 20  # logging.INFO, as ti-containers and sagemaker-training
_VALID_ENV_NAME = re.compile(r"^[^=\0]+$")


@dataclass(frozen=True)
class Resources:
    num_gpus: int
    num_cpus: int
    current_ip: str


def detect_resources(job, environ=None):
    """GPUs/CPUs from trainingjobconfig, else what this machine gives the process."""
    environ = os.environ if environ is None else environ
    num_gpus = job.num_gpus if job.num_gpus is not None else _detect_gpus(environ)
    num_cpus = job.num_cpus if job.num_cpus is not None else _detect_cpus()
    current_ip = job.host_addresses.get(job.current_host) or _own_address(job.current_host)
    return Resources(num_gpus=num_gpus, num_cpus=num_cpus, current_ip=current_ip)


def build(job, layout, resources, base_env, python):
    """The complete environment of the user code: ``base_env`` plus every family.

    ``python`` is the job's interpreter, whose directory goes first on PATH so
    that ``python`` in a command is the job's Python.
    """
    env = dict(base_env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    python_dir = os.path.dirname(python)
    path = env.get("PATH", os.defpath)
    # Only when `python` on PATH is another one (a job venv): in an image PATH stays as it is.
    if os.path.dirname(shutil.which("python", path=path) or "") != python_dir:
        env["PATH"] = python_dir + os.pathsep + path
    typed = hps.typed_mapping(job.hyperparameters)
    entry_point = job.entry_point if not job.command else ""
    host_index = job.host_index

    env.update(
        {
            ROOT_ENV: layout.root,
            "TRAINING_JOB_NAME": job.job_name,
            "TRAINING_LAYOUT": layout.name,
            CURRENT_HOST_ENV: job.current_host,
            "TRAINING_HOST_INDEX": str(host_index),
            "TRAINING_NUM_HOSTS": str(len(job.hosts)),
        }
    )

    # --- TI-ONE, as ti-containers' Config.get_envs() (str as it is, anything else json.dumps)
    ti_log_level = job.reserved_value_decoded("ti_container_log_level", DEFAULT_LOG_LEVEL)
    env.update(
        {
            "TM_NUM_GPUS": str(resources.num_gpus),
            "TM_NUM_CPUS": str(resources.num_cpus),
            "TM_HPS": json.dumps(typed),
            "TM_CURRENT_HOST": job.current_host,
            "TM_HOSTS": json.dumps(job.hosts),
            "TM_CHANNELS": json.dumps(job.channels),
            "TM_MODEL_DIR": layout.model_dir,
            "TM_OUTPUT_DATA_DIR": layout.output_data_dir,
            "TM_INPUT_CONFIG_DIR": layout.config_dir,
            "TM_NETWORK_INTERFACE_NAME": _ti_network_interface(job, base_env),
            "TM_USER_ENTRY_POINT": entry_point,
            "TM_LOG_LEVEL": ti_log_level if isinstance(ti_log_level, str) else json.dumps(ti_log_level),
        }
    )
    for channel in job.channels:
        _set_named(env, "TM_CHANNEL_", channel, layout.channel_dir(channel))

    # --- PAI (seed 003)
    env.update(
        {
            "PAI_HPS": json.dumps(typed),
            "PAI_USER_ARGS": hps.to_shell_args(job.hyperparameters),
            "PAI_OUTPUT_MODEL": _as_dir(layout.model_dir),
            "PAI_OUTPUT_CHECKPOINTS": _as_dir(layout.checkpoint_dir),
            "PAI_CONFIG_DIR": _as_dir(layout.config_dir),
            "PAI_WORKING_DIR": layout.code_dir,
        }
    )
    for hp in job.hyperparameters:
        env["PAI_HPS_" + hps.env_suffix(hp.name)] = hp.raw
    for channel in job.channels:
        if channel in job.channel_files:
            value = os.path.join(layout.channel_dir(channel), job.channel_files[channel])
        else:
            value = _as_dir(layout.channel_dir(channel))
        env["PAI_INPUT_" + hps.env_suffix(channel)] = value

    # --- SageMaker, as sagemaker-training's Environment.to_env_vars()
    env.update(sagemaker.env(job, layout, resources.num_gpus, resources.num_cpus, base_env))
    if layout.name == "sagemaker":
        pythonpath = env.get("PYTHONPATH")
        env["PYTHONPATH"] = layout.code_dir + (os.pathsep + pythonpath if pythonpath else "")

    # --- ModelArts
    env.update(
        {
            "MA_JOB_DIR": layout.job_dir,
            "MA_NUM_HOSTS": str(len(job.hosts)),
            "MA_CURRENT_HOST": job.current_host,
            "MA_CURRENT_IP": resources.current_ip,
            "MA_NUM_GPUS": str(resources.num_gpus),
            "VC_TASK_INDEX": str(host_index),
            "MA_TASK_NAME": "worker",
        }
    )
    if layout.name == "modelarts":
        pythonpath = env.get("PYTHONPATH")
        env["PYTHONPATH"] = layout.job_dir + (os.pathsep + pythonpath if pythonpath else "")
    return env


def read_job_variables(fd):
    """The job's own variables from descriptor ``fd`` (``train --environment-fd``): a JSON object of names to
    strings, read to its end and the descriptor closed, so the user code never inherits it.

    A launcher hands them over this way, not in the environment, when privileged processes (bubblewrap as root,
    setpriv before it drops, nsenter) start ``train``: the loader acts on LD_PRELOAD, LD_AUDIT, ... in every process
    that execs with them, so only ``train``, already the job's unprivileged user, may apply them (ValueError if the
    content is not such an object)."""
    try:
        chunks = list(iter(lambda: os.read(fd, 1 << 20), b""))
    finally:
        os.close(fd)
    variables = json.loads(b"".join(chunks).decode("utf-8"))
    if not isinstance(variables, dict) or not all(
        isinstance(name, str) and _VALID_ENV_NAME.match(name) and isinstance(value, str) and "\0" not in value
        for name, value in variables.items()
    ):
        raise ValueError("not a JSON object of variable names to strings")
    return variables


def _set_named(env, prefix, name, value):
    """``PREFIX<NAME upper-cased>`` as the original toolkits name it, plus the
    sanitised ``PREFIX<NAME_WITH_UNDERSCORES>`` when that differs."""
    original = prefix + name.upper()
    if _VALID_ENV_NAME.match(original):
        env[original] = value
    env[prefix + hps.env_suffix(name)] = value


def _as_dir(path):
    return path.rstrip("/") + "/"


def _detect_gpus(environ):
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
        return 0 if visible.strip() in ("", "NoDevFiles") else len(devices)
    nvidia_smi = shutil.which("nvidia-smi")
    if not nvidia_smi:
        return 0
    try:
        listing = subprocess.run(
            [nvidia_smi, "--list-gpus"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def _detect_cpus():
    # What ti-containers and sagemaker-training report (the machine's CPUs); a launcher
    # that limits CPUs says so with trainingjobconfig num_cpus. multiprocessing.cpu_count(), without importing
    # multiprocessing (~0.015 s of pickle and socket imports at every start).
    count = os.cpu_count()
    if count is None:
        raise NotImplementedError("cannot determine number of cpus")
    return count


def _ti_network_interface(job, environ):
    """ti-containers: OMPI_MCA_btl_tcp_if_include, else ti_network_interface_name, else eth0
    (it never reads resourceconfig.json's; ours does in the other layouts)."""
    if environ.get("OMPI_MCA_btl_tcp_if_include"):
        return environ["OMPI_MCA_btl_tcp_if_include"]
    if job.layout_name == "ti":
        return str(job.reserved_value_decoded("ti_network_interface_name", "eth0"))
    return job.network_interface_name


def _own_address(host):
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return host

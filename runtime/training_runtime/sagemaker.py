"""The SageMaker family, exactly as ``sagemaker-training`` (5.1.4) gives it to a script.

``Environment.to_env_vars()`` of the toolkit: every ``SM_<KEY>`` of its mapping (a
string as it is, null as "", anything else compact sorted JSON), ``SM_TRAINING_ENV``
(every property of its Environment), ``SM_CHANNEL_<NAME>``, ``SM_HP_<NAME>``, and the
variables its Environment puts in ``os.environ``: ``CURRENT_HOST``,
``SAGEMAKER_JOB_NAME``, ``SAGEMAKER_REGION``. ``PYTHONPATH`` starts with the code dir
(the toolkit puts its own sys.path after it; ours keeps the inherited PYTHONPATH).
"""

import configparser
import json
import os
import shutil
import subprocess

from training_runtime import hyperparameters as hps

DEFAULT_LOG_LEVEL = 20
DEFAULT_INSTANCE_GROUP = "homogeneousCluster"
# Framework parameters that put the current instance group into the distribution groups.
_DISTRIBUTION_FLAGS = (
    "sagemaker_mpi_enabled", "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled", "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled", "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)


def reserved_values(job):
    """Decoded ``sagemaker_*`` (and other SageMaker-reserved) hyperparameters."""
    return {name: hp.value for name, hp in job.reserved.items()
            if name.startswith("sagemaker_") or name in hps.SAGEMAKER_RESERVED}


def submit_directory(job):
    """``sagemaker_submit_directory`` as the toolkit reads it (None when absent)."""
    value = reserved_values(job).get("sagemaker_submit_directory")
    return None if value is None else str(value)


def env(job, layout, num_gpus, num_cpus, environ):
    """The SageMaker variables for the user code (``environ`` is the runtime's own)."""
    reserved = reserved_values(job)
    rc = dict(job.resource_config)
    if rc.get("current_host") not in (None, job.current_host):
        # Local mode: the hosts share one resourceconfig.json; each sees itself as current.
        rc["current_host"] = job.current_host
    hosts = list(rc.get("hosts") or job.hosts)
    current_host = job.current_host
    groups_config = rc.get("instance_groups", []) or []
    current_group = rc.get("current_group_name", DEFAULT_INSTANCE_GROUP)
    framework_params = {k: v for k, v in reserved.items() if k not in hps.SAGEMAKER_SETTINGS}
    if "sagemaker_distribution_instance_groups" in framework_params:
        distribution_groups = framework_params["sagemaker_distribution_instance_groups"]
    else:
        distribution_groups = [current_group] if any(framework_params.get(f) for f in _DISTRIBUTION_FLAGS) else []
    if groups_config:
        distribution_hosts = [h for g in groups_config if g["instance_group_name"] in distribution_groups
                              for h in g["hosts"]]
    else:
        distribution_hosts = list(hosts)
    master = distribution_hosts[0] if distribution_hosts else hosts[0]
    # A job of our own launcher names its entry point in trainingjobconfig.json instead.
    program = (environ.get("SAGEMAKER_PROGRAM") or reserved.get("sagemaker_program")
               or (job.entry_point if not job.command else None))
    module_name = str(program)
    if module_name.endswith(".py"):
        module_name = module_name[:-3]
    submit = submit_directory(job)
    mp_parameters = environ.get("SM_HP_MP_PARAMETERS")
    hyperparameters = {hp.name: hp.value for hp in job.hyperparameters}
    root = layout.root
    channel_dirs = {channel: layout.channel_dir(channel) for channel in job.channels}
    training_env = {
        "additional_framework_parameters": framework_params,
        "channel_input_dirs": channel_dirs,
        "current_host": current_host,
        "current_instance_group": current_group,
        "current_instance_group_hosts": next(
            (g["hosts"] for g in groups_config if g["instance_group_name"] == current_group), []),
        "current_instance_type": rc.get("current_instance_type", "local"),
        "distribution_hosts": distribution_hosts,
        "distribution_instance_groups": distribution_groups,
        "framework_module": environ.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": hosts,
        "hyperparameters": hyperparameters,
        "input_config_dir": layout.config_dir,
        "input_data_config": job.input_data_config,
        "input_dir": os.path.join(root, "input"),
        "instance_groups": [g["instance_group_name"] for g in groups_config],
        "instance_groups_dict": {g["instance_group_name"]: g for g in groups_config},
        "is_hetero": len(groups_config) > 1,
        "is_master": current_host == master,
        "is_modelparallel_enabled": mp_parameters and mp_parameters != "{}",
        "is_smddpmprun_installed": shutil.which("smddpmprun") is not None,
        "is_smddprun_installed": shutil.which("smddprun") is not None,
        "job_name": environ.get("TRAINING_JOB_NAME"),
        "log_level": reserved.get("sagemaker_container_log_level", DEFAULT_LOG_LEVEL),
        "master_hostname": master,
        "model_dir": layout.model_dir,
        "module_dir": submit if submit is not None else layout.code_dir,
        "module_name": module_name,
        "network_interface_name": rc.get("network_interface_name", "eth0"),
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "num_neurons": num_neurons(),
        "output_data_dir": layout.output_data_dir,
        "output_dir": layout.output_dir,
        "output_intermediate_dir": os.path.join(layout.output_dir, "intermediate"),
        "resource_config": rc,
        "topology": rc.get("topology", []),
        "user_entry_point": program,
    }
    mapping = {key: training_env[key] for key in (
        "hosts", "network_interface_name", "user_entry_point", "resource_config", "input_data_config",
        "output_data_dir", "current_host", "current_instance_type", "current_instance_group",
        "current_instance_group_hosts", "instance_groups", "instance_groups_dict",
        "distribution_instance_groups", "is_hetero", "module_name", "log_level", "framework_module",
        "input_dir", "input_config_dir", "output_dir", "num_cpus", "num_gpus", "num_neurons", "model_dir",
        "module_dir", "output_intermediate_dir")}
    mapping.update({
        "hps": hyperparameters,
        "framework_params": framework_params,
        "channels": sorted(channel_dirs),
        "training_env": training_env,
        "user_args": hps.sagemaker_args(job.hyperparameters),
    })
    if training_env["topology"]:
        mapping["topology"] = training_env["topology"]
    for channel, path in channel_dirs.items():
        mapping["channel_%s" % channel] = path
    for name, value in hyperparameters.items():
        mapping["hp_%s" % name] = value
    variables = {"SM_%s" % key.upper(): format_value(value) for key, value in mapping.items()}
    for channel, path in channel_dirs.items():  # also the shell-friendly names (an addition)
        variables.setdefault("SM_CHANNEL_" + hps.env_suffix(channel), path)
    for name, value in hyperparameters.items():
        variables.setdefault("SM_HP_" + hps.env_suffix(name), format_value(value))
    variables.update({
        "CURRENT_HOST": current_host,
        "SAGEMAKER_JOB_NAME": str(reserved.get("sagemaker_job_name", "")),
        "SAGEMAKER_REGION": str(reserved.get("sagemaker_region") or default_region(environ) or ""),
    })
    return variables


def format_value(value):
    """sagemaker-training's mapping.to_env_vars value encoding."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def default_region(environ):
    """boto3's default region: AWS_DEFAULT_REGION, else the profile's region in ~/.aws/config."""
    if environ.get("AWS_DEFAULT_REGION"):
        return environ["AWS_DEFAULT_REGION"]
    path = environ.get("AWS_CONFIG_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "config")
    profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (OSError, configparser.Error):
        return None
    section = profile if profile == "default" else "profile " + profile
    return parser.get(section, "region", fallback=None) if parser.has_section(section) else None


def num_neurons():
    """Neuron cores (``neuron-ls -j``), 0 without the Neuron tools, as the toolkit counts them."""
    neuron_ls = shutil.which("neuron-ls")
    if not neuron_ls:
        return 0
    try:
        devices = json.loads(subprocess.run([neuron_ls, "-j"], capture_output=True, timeout=30, check=True).stdout)
        return sum(item.get("nc_count", 0) for item in devices)
    except (OSError, ValueError, subprocess.SubprocessError, AttributeError):
        return 0

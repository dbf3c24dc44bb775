"""Reading (and, for the launcher, writing) the config files of a job root.

All four files live in ``input/config/`` of every layout:

``hyperparameters.json`` (required)
    ``{"epochs": "10", "lr": "0.01", "ti_program": "train.py"}``: every value a
    string (see :mod:`training_runtime.hyperparameters`); keys starting with
    ``ti_`` / ``sagemaker_`` are reserved and not passed to the script.
``resourceconfig.json`` (required)
    ``{"current_host": "algo-1", "hosts": ["algo-1", "algo-2"],
    "network_interface_name": "eth0"}``
``inputdataconfig.json`` (required)
    ``{"train": {"TrainingInputMode": "File"}, ...}``: the keys are the channels.
``trainingjobconfig.json`` (the project's own; optional so that plain TI /
SageMaker job roots run too)
    ``{"job_name", "layout", "entry_point", "command", "distribution",
    "processes_per_host", "host_addresses", "master_port", "num_gpus",
    "num_cpus", "channel_files", "parameter_servers", "elastic"}`` (see :class:`JobConfig`).
    ``elastic`` (distribution pytorch only): ``{"min_hosts": 2, "max_hosts": 3,
    "max_restarts": 3}``, elastic training under torchrun (see :mod:`training_runtime.distributed`).

Which host this process is: ``--current-host`` > ``$TRAINING_CURRENT_HOST`` >
``hosts[$JOB_COMPLETION_INDEX]`` (Kubernetes Indexed Job) > ``current_host`` of
resourceconfig.json. The job root: ``--root`` > ``$TRAINING_ROOT`` > the container
root of ``--layout`` (``/ml`` for pai, ...) > ``/opt/ml``.
"""

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from training_runtime import hyperparameters as hps
from training_runtime.contract import CURRENT_HOST_ENV, ROOT_ENV
from training_runtime.errors import InvalidJobError
from training_runtime.files import write_atomically
from training_runtime.layouts import CONTAINER_ROOTS, DEFAULT_LAYOUT, LAYOUT_NAMES, layout_for

log = logging.getLogger(__name__)

HYPERPARAMETERS_FILE = "hyperparameters.json"
RESOURCE_CONFIG_FILE = "resourceconfig.json"
INPUT_DATA_CONFIG_FILE = "inputdataconfig.json"
TRAINING_JOB_CONFIG_FILE = "trainingjobconfig.json"
REQUIRED_FILES = (HYPERPARAMETERS_FILE, RESOURCE_CONFIG_FILE, INPUT_DATA_CONFIG_FILE)

DEFAULT_ROOT = "/opt/ml"
DEFAULT_MASTER_PORT = 29500
DEFAULT_NETWORK_INTERFACE = "eth0"
DISTRIBUTIONS = ("pytorch", "tensorflow", "mpi")

_JOB_CONFIG_KEYS = (
    "job_name", "layout", "entry_point", "command", "distribution", "processes_per_host",
    "host_addresses", "master_port", "num_gpus", "num_cpus", "channel_files",
    "parameter_servers", "elastic",
)


@dataclass
class JobConfig:
    """Everything the runtime knows about the job, read from ``input/config/``."""

    job_name: str
    layout_name: str
    #: User hyperparameters in file order (reserved keys removed).
    hyperparameters: list[hps.Hyperparameter]
    #: ``ti_*`` / ``sagemaker_*`` keys, decoded.
    reserved: dict[str, hps.Hyperparameter]
    #: Channel names in inputdataconfig.json order.
    channels: list[str]
    hosts: list[str]
    current_host: str
    network_interface_name: str = DEFAULT_NETWORK_INTERFACE
    #: trainingjobconfig ``command``: run through ``bash -c``, no implicit arguments.
    command: Optional[str] = None
    #: The script to run (trainingjobconfig ``entry_point`` > ``ti_program`` > ``sagemaker_program``).
    entry_point: Optional[str] = None
    #: Where entry_point came from, for error messages.
    entry_point_source: str = ""
    distribution: Optional[str] = None
    processes_per_host: int = 1
    host_addresses: dict[str, str] = field(default_factory=dict)
    master_port: int = DEFAULT_MASTER_PORT
    num_gpus: Optional[int] = None
    num_cpus: Optional[int] = None
    #: channel -> file name for single-object channels (PAI_INPUT_<CH> is the file).
    channel_files: dict[str, str] = field(default_factory=dict)
    #: TensorFlow: the first n hosts are parameter servers, the rest workers.
    parameter_servers: int = 0
    #: distribution pytorch: elastic training under torchrun (c10d rendezvous), or None.
    elastic: Optional["Elastic"] = None
    resource_config: dict = field(default_factory=dict)
    input_data_config: dict = field(default_factory=dict)

    @property
    def host_index(self):
        return self.hosts.index(self.current_host)

    def address_of(self, host):
        """The address other hosts reach ``host`` at (host_addresses, else the name)."""
        return self.host_addresses.get(host, host)

    def reserved_value_decoded(self, name, default=None):
        """The decoded value of a reserved hyperparameter (as the original runtimes use it)."""
        hp = self.reserved.get(name)
        return default if hp is None else hp.value

    def reserved_value(self, name, default=None):
        hp = self.reserved.get(name)
        if hp is None:
            return default
        return hp.value if isinstance(hp.value, str) else hp.raw


@dataclass(frozen=True)
class Elastic:
    """trainingjobconfig ``elastic``: torchrun ``--nnodes min_hosts:max_hosts --max-restarts max_restarts``."""

    min_hosts: int
    max_hosts: int
    max_restarts: int


# --------------------------------------------------------------------------- reading


def resolve_root(cli_root=None, environ=None, layout_name=None):
    """``--root`` > ``$TRAINING_ROOT`` > ``$SAGEMAKER_BASE_DIR`` (sagemaker-training's
    setting) > the container root of ``--layout`` > /opt/ml."""
    environ = os.environ if environ is None else environ
    root = (
        cli_root
        or environ.get(ROOT_ENV)
        or environ.get("SAGEMAKER_BASE_DIR")
        or CONTAINER_ROOTS.get(layout_name)
        or DEFAULT_ROOT
    )
    return os.path.abspath(root)


def load_job(root, layout_name=None, current_host=None, environ=None):
    """Read the job root; returns ``(layout, JobConfig)``.

    Raises :class:`InvalidJobError` (one line naming the file and field) for a
    missing or malformed file, an unknown layout or a current host not in hosts.
    """
    environ = os.environ if environ is None else environ
    if not os.path.isdir(root):
        raise InvalidJobError(
            "job root %s does not exist: pass --root DIR or set TRAINING_ROOT to the job directory"
            % root
        )
    # input/config/ is at the same place in every layout, so it can be read first.
    config_dir = layout_for(DEFAULT_LAYOUT, root).config_dir
    job_file = os.path.join(config_dir, TRAINING_JOB_CONFIG_FILE)
    job_doc = _read_json(job_file, required=False)
    if job_doc is None:
        job_doc = {}
    _check_type(job_doc, dict, job_file, "the file", "a JSON object")
    unknown = sorted(set(job_doc) - set(_JOB_CONFIG_KEYS))
    if unknown:
        log.warning("%s: ignoring unknown keys %s", job_file, ", ".join(unknown))

    hp_file = os.path.join(config_dir, HYPERPARAMETERS_FILE)
    hp_doc = _read_json(hp_file)
    _check_type(hp_doc, dict, hp_file, "the file", 'a JSON object {"name": "value", ...}')
    layout_name = (
        layout_name
        or _optional_str(job_doc, "layout", job_file)
        or _detect_layout(hp_doc)
    )
    if layout_name not in LAYOUT_NAMES:
        raise InvalidJobError(
            "unknown layout %r (from --layout or %s 'layout'): use one of %s"
            % (layout_name, job_file, ", ".join(LAYOUT_NAMES))
        )
    layout = layout_for(layout_name, root)

    rc_file, idc_file = (layout.config_file(name) for name in REQUIRED_FILES[1:])
    rc_doc = _read_json(rc_file)
    idc_doc = _read_json(idc_file)
    _check_type(rc_doc, dict, rc_file, "the file", 'a JSON object {"hosts": [...], ...}')
    _check_type(idc_doc, dict, idc_file, "the file", 'a JSON object {"<channel>": {...}, ...}')

    user_hps, reserved = [], {}
    for name, stored in hp_doc.items():
        hp = hps.decode(name, stored)
        if hps.is_reserved(name, layout_name):
            reserved[name] = hp
        else:
            user_hps.append(hp)

    hosts = rc_doc.get("hosts")
    if (
        not isinstance(hosts, list)
        or not hosts
        or not all(isinstance(h, str) and h for h in hosts)
    ):
        raise InvalidJobError(
            "%s: 'hosts' must be a non-empty list of host names, got %s"
            % (rc_file, json.dumps(hosts))
        )
    duplicates = sorted({h for h in hosts if hosts.count(h) > 1})
    if duplicates:
        raise InvalidJobError("%s: 'hosts' lists %s more than once" % (rc_file, ", ".join(duplicates)))

    job = JobConfig(
        job_name="",
        layout_name=layout_name,
        hyperparameters=user_hps,
        reserved=reserved,
        channels=list(idc_doc),
        hosts=hosts,
        current_host="",
        resource_config=rc_doc,
        input_data_config=idc_doc,
    )
    job.current_host = _resolve_current_host(current_host, hosts, rc_doc, rc_file, environ)
    job.network_interface_name = (
        _optional_str(rc_doc, "network_interface_name", rc_file)
        or job.reserved_value("ti_network_interface_name")
        or DEFAULT_NETWORK_INTERFACE
    )
    job.job_name = (
        _optional_str(job_doc, "job_name", job_file)
        or job.reserved_value("ti_job_name")
        or job.reserved_value("sagemaker_job_name")
        or environ.get("TRAINING_JOB_NAME")
        or os.path.basename(root.rstrip(os.sep))
    )
    # Precedence: trainingjobconfig command > entry_point > ti_program > sagemaker_program.
    job.command = _optional_str(job_doc, "command", job_file)
    for source, value in (
        ("%s 'entry_point'" % job_file, _optional_str(job_doc, "entry_point", job_file)),
        ("hyperparameter ti_program", job.reserved_value("ti_program")),
        ("hyperparameter sagemaker_program", job.reserved_value("sagemaker_program")),
    ):
        if value:
            job.entry_point, job.entry_point_source = value, source
            break
    distribution = job_doc.get("distribution")
    if distribution is not None and distribution not in DISTRIBUTIONS:
        raise InvalidJobError(
            "%s: 'distribution' is %s: use null or one of %s"
            % (job_file, json.dumps(distribution), ", ".join(DISTRIBUTIONS))
        )
    job.distribution = distribution
    job.processes_per_host = _int(job_doc, "processes_per_host", job_file, 1, minimum=1)
    job.master_port = _int(job_doc, "master_port", job_file, DEFAULT_MASTER_PORT, minimum=1, maximum=65535)
    job.num_gpus = _int(job_doc, "num_gpus", job_file, None, minimum=0)
    job.num_cpus = _int(job_doc, "num_cpus", job_file, None, minimum=1)
    job.parameter_servers = _int(job_doc, "parameter_servers", job_file, 0, minimum=0)
    job.host_addresses = _str_mapping(job_doc, "host_addresses", job_file)
    job.channel_files = _str_mapping(job_doc, "channel_files", job_file)
    job.elastic = _elastic(job_doc, job_file, distribution, len(hosts))
    return layout, job


def _elastic(job_doc, job_file, distribution, host_count):
    doc = job_doc.get("elastic")
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise InvalidJobError(
            '%s: \'elastic\' must be an object {"min_hosts": N, "max_hosts": M, "max_restarts": R}, got %s'
            % (job_file, json.dumps(doc))
        )
    if distribution != "pytorch":
        raise InvalidJobError(
            "%s: 'elastic' needs distribution pytorch (torchrun), but distribution is %s"
            % (job_file, json.dumps(distribution))
        )
    unknown = sorted(set(doc) - {"min_hosts", "max_hosts", "max_restarts"})
    if unknown:
        raise InvalidJobError(
            "%s: 'elastic' has unknown key %r: use min_hosts, max_hosts and max_restarts" % (job_file, unknown[0])
        )
    where = "%s 'elastic'" % job_file
    max_hosts = _int(doc, "max_hosts", where, host_count, minimum=1)
    min_hosts = _int(doc, "min_hosts", where, max_hosts, minimum=1)
    restarts = _int(doc, "max_restarts", where, 3, minimum=0)
    if min_hosts > max_hosts:
        raise InvalidJobError(
            "%s: min_hosts %d is more than max_hosts %d: give min_hosts <= max_hosts" % (where, min_hosts, max_hosts)
        )
    return Elastic(min_hosts=min_hosts, max_hosts=max_hosts, max_restarts=restarts)


def _detect_layout(hp_doc):
    """A plain root without trainingjobconfig.json: a SageMaker one names its script with
    sagemaker_program (and no ti_program); everything else is TI-ONE's."""
    if "sagemaker_program" in hp_doc and "ti_program" not in hp_doc:
        return "sagemaker"
    return DEFAULT_LAYOUT


def _resolve_current_host(cli_host, hosts, rc_doc, rc_file, environ):
    if cli_host:
        host, source = cli_host, "--current-host"
    elif environ.get(CURRENT_HOST_ENV):
        host, source = environ[CURRENT_HOST_ENV], CURRENT_HOST_ENV
    elif environ.get("JOB_COMPLETION_INDEX", "") != "":
        index = environ["JOB_COMPLETION_INDEX"]
        if not index.isdigit() or int(index) >= len(hosts):
            raise InvalidJobError(
                "JOB_COMPLETION_INDEX=%s does not index the %d hosts of %s: the Indexed Job's "
                "completions must equal the number of hosts" % (index, len(hosts), rc_file)
            )
        return hosts[int(index)]
    else:
        host, source = _optional_str(rc_doc, "current_host", rc_file), "%s 'current_host'" % rc_file
        if not host:
            raise InvalidJobError(
                "%s has no 'current_host': pass --current-host NAME or set TRAINING_CURRENT_HOST"
                % rc_file
            )
    if host not in hosts:
        raise InvalidJobError(
            "current host %r (from %s) is not in 'hosts' %s of %s: pass one of those names"
            % (host, source, json.dumps(hosts), rc_file)
        )
    return host


def _read_json(path, required=True):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        if not required:
            return None
        raise InvalidJobError(
            "missing config file %s: the launcher must write it before starting train" % path
        ) from None
    except ValueError as error:
        raise InvalidJobError("%s is not valid JSON (%s): fix or rewrite the file" % (path, error)) from None


def _check_type(value, kind, path, what, expected):
    if not isinstance(value, kind):
        raise InvalidJobError("%s: %s must be %s, got %s" % (path, what, expected, type(value).__name__))


def _optional_str(doc, key, path):
    value = doc.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise InvalidJobError("%s: '%s' must be a string, got %s" % (path, key, json.dumps(value)))
    return value


def _int(doc, key, path, default, minimum=None, maximum=None):
    value = doc.get(key)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        bounds = "an integer"
        if minimum is not None:
            bounds += " >= %d" % minimum
        if maximum is not None:
            bounds += " and <= %d" % maximum
        raise InvalidJobError("%s: '%s' must be %s, got %s" % (path, key, bounds, json.dumps(value)))
    return value


def _str_mapping(doc, key, path):
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(v, str) and v for v in value.values()
    ):
        raise InvalidJobError(
            '%s: \'%s\' must be an object of strings {"name": "value"}, got %s'
            % (path, key, json.dumps(value))
        )
    return dict(value)


# --------------------------------------------------------------------------- writing


def encode_hyperparameters(mapping):
    """Typed hyperparameters -> the all-strings form of ``hyperparameters.json``.

    Strings are kept as they are, everything else is JSON-encoded
    (``10`` -> ``"10"``, ``True`` -> ``"true"``, ``[1, 2]`` -> ``"[1, 2]"``), so the
    runtime decodes the typed values back for the *_HPS variables.
    """
    return {
        str(name): value if isinstance(value, str) else json.dumps(value)
        for name, value in mapping.items()
    }


def write_config_files(
    layout,
    hyperparameters=None,
    resource_config=None,
    input_data_config=None,
    job_config=None,
):
    """Write the given config files into ``layout.config_dir`` (atomically, each
    replacing the previous one). ``hyperparameters`` may hold typed values: they
    are stored with :func:`encode_hyperparameters`."""
    os.makedirs(layout.config_dir, exist_ok=True)
    documents = (
        (HYPERPARAMETERS_FILE, None if hyperparameters is None else encode_hyperparameters(hyperparameters)),
        (RESOURCE_CONFIG_FILE, resource_config),
        (INPUT_DATA_CONFIG_FILE, input_data_config),
        (TRAINING_JOB_CONFIG_FILE, job_config),
    )
    for name, document in documents:
        if document is None:
            continue
        write_atomically(layout.config_file(name), json.dumps(document, indent=2) + "\n")

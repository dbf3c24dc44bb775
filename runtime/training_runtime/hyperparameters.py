"""Hyperparameters: typed decoding, reserved keys, environment names, arguments.

``hyperparameters.json`` holds every value as a string (TI-ONE, SageMaker, PAI).
Like ``ti-containers`` and ``sagemaker-training``, a value that is valid JSON is
decoded (``"128"`` -> 128, ``"true"`` -> True, ``"\"adam\""`` -> "adam", the TI
SDK's encoding); anything else stays the string. What the script gets depends on
the layout, exactly as the runtime it stands in for gives it:

ti (``ti-containers``)
    ``--name str(value)`` in file order; a blank value gives a bare ``--name``
    (``"true"`` -> ``True``, ``"1e-3"`` -> ``0.001``, ``"\"adam\""`` -> ``adam``).
    Keys starting with ``ti_`` are reserved.
sagemaker (``sagemaker-training``)
    sorted by name, ``-k`` for a one-letter name, ``--name`` otherwise, and always a
    value: ``str(value)``, ``""`` for null, ``k=v,k2=v2`` for an object. Keys
    starting with ``sagemaker_`` and :data:`SAGEMAKER_RESERVED` are reserved.
pai, modelarts (their documents)
    ``--name value`` in file order with the string exactly as written in the file;
    a blank value gives a bare ``--name``. ``ti_`` / ``sagemaker_`` keys are reserved.
"""

import json
import re
import shlex
from dataclasses import dataclass

#: Keys with these prefixes configure the platform and never reach the script.
RESERVED_PREFIXES = ("ti_", "sagemaker_")
#: sagemaker-training's reserved names without the prefix (params.SAGEMAKER_HYPERPARAMETERS).
SAGEMAKER_RESERVED = ("default_user_module_name", "_tuning_objective_metric")
#: The sagemaker_* keys that are not framework parameters (SM_FRAMEWORK_PARAMS).
SAGEMAKER_SETTINGS = (
    "sagemaker_program", "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region", "sagemaker_container_log_level", "sagemaker_job_name",
    "sagemaker_s3_output",
) + SAGEMAKER_RESERVED

_NOT_ENV_CHARACTER = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class Hyperparameter:
    name: str
    #: The string from hyperparameters.json (what the script receives as argument).
    raw: str
    #: The JSON-decoded value (what the *_HPS variables carry).
    value: object


def decode(name, stored):
    """A :class:`Hyperparameter` from one ``hyperparameters.json`` entry.

    A value that is not a string (a launcher wrote typed JSON) is accepted: it is
    its own typed value and its JSON text is the string form.
    """
    if isinstance(stored, str):
        try:
            value = json.loads(stored)
        except ValueError:
            value = stored
        return Hyperparameter(name, stored, value)
    return Hyperparameter(name, json.dumps(stored), stored)


def is_reserved(name, layout_name=None):
    """Whether ``name`` configures the platform (not passed to the script) in the layout."""
    if layout_name == "ti":
        return name.startswith("ti_")
    if layout_name == "sagemaker":
        return name.startswith("sagemaker_") or name in SAGEMAKER_RESERVED
    return name.startswith(RESERVED_PREFIXES)


def python_str(value):
    """``str()`` of a decoded value, as ti-containers / sagemaker-training format it."""
    return "" if value is None else str(value)


def args_for(layout_name, hyperparameters):
    """The hyperparameter arguments of an entry point in ``layout_name``."""
    if layout_name == "ti":
        return ti_args(hyperparameters)
    if layout_name == "sagemaker":
        return sagemaker_args(hyperparameters)
    return to_args(hyperparameters)


def ti_args(hyperparameters):
    """ti-containers' Config.get_args: ``str()`` of the decoded value, bare flag when blank."""
    args = []
    for hp in hyperparameters:
        args.append("--" + hp.name)
        text = str(hp.value)
        if text.strip():
            args.append(text)
    return args


def sagemaker_args(hyperparameters):
    """sagemaker-training's mapping.to_cmd_args: sorted, ``-k`` for one letter, always a value."""
    args = []
    for hp in sorted(hyperparameters, key=lambda hp: hp.name):
        args.append(("--%s" if len(hp.name) > 1 else "-%s") % hp.name)
        if isinstance(hp.value, dict):
            args.append(",".join("%s=%s" % (k, v) for k, v in sorted(hp.value.items())))
        else:
            args.append(python_str(hp.value))
    return args


def env_suffix(name):
    """``train.learning-rate`` -> ``TRAIN_LEARNING_RATE`` (PAI's rule: upper-case,
    every character outside [A-Za-z0-9_] becomes ``_``)."""
    return _NOT_ENV_CHARACTER.sub("_", name).upper()


def to_args(hyperparameters):
    """``--name value`` pairs, one argv element per value, in the order given.

    An empty (or blank) value gives a bare ``--name``, as ``ti-containers`` does,
    so boolean flags (``action="store_true"``) work.
    """
    args = []
    for hp in hyperparameters:
        args.append("--" + hp.name)
        if hp.raw.strip():
            args.append(hp.raw)
    return args


def to_shell_args(hyperparameters):
    """:func:`to_args` as one shell string (PAI_USER_ARGS): every element quoted
    once, so ``shlex.split`` (or ``$PAI_USER_ARGS`` inside ``eval``/``bash -c``)
    gives back exactly :func:`to_args`."""
    return " ".join(shlex.quote(arg) for arg in to_args(hyperparameters))


def typed_mapping(hyperparameters):
    """name -> typed value, in the order given (the *_HPS JSON objects)."""
    return {hp.name: hp.value for hp in hyperparameters}

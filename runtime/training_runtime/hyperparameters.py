"""Hyperparameters: typed decoding, reserved keys, environment names, arguments.

``hyperparameters.json`` holds every value as a string (TI-ONE, SageMaker, PAI).
Like ``ti-containers`` and ``sagemaker-training``, a value that is valid JSON is
decoded for the typed views (``TM_HPS``, ``SM_HPS``, ``PAI_HPS``): ``"128"`` -> 128,
``"true"`` -> true, ``"[1, 2]"`` -> [1, 2]; anything else stays a string.
Command-line arguments and the per-name variables (``PAI_HPS_<NAME>``,
``SM_HP_<NAME>``) carry the string exactly as written in the file, so ``"1e-3"``
arrives as ``1e-3`` (not re-formatted) and ``"true"`` as ``true``.
"""

import json
import re
import shlex
from dataclasses import dataclass

#: Keys with these prefixes configure the platform and never reach the script.
RESERVED_PREFIXES = ("ti_", "sagemaker_")

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


def is_reserved(name):
    return name.startswith(RESERVED_PREFIXES)


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

"""The launch backends by name. Backends are named by import path and loaded on first use, so this module imports
none of them (no import cycle: a backend imports the base module, operators/launch/base.py, never this one) and a worker
only loads the client library of the backend a job uses.
"""

from __future__ import annotations

import importlib

from operators.launch.base import Launcher
from operators.spec.backend_options import BACKENDS

# One entry per name in BACKENDS (tests/operators/launch/test_registry.py): a name the spec accepts has a backend.
_BACKENDS = {
    "local": "operators.launch.local.launcher:LocalLauncherHook",
    "kubernetes": "operators.launch.kubernetes.launcher:KubernetesLauncherHook",
    "docker": "operators.launch.docker.launcher:DockerLauncherHook",
}


def launcher_class(backend: str) -> type:
    try:
        module, _, name = _BACKENDS[backend].partition(":")
    except KeyError:
        raise ValueError(
            f"backend {backend!r} is not one of {', '.join(BACKENDS)}; set the spec's 'backend' field"
        ) from None
    return getattr(importlib.import_module(module), name)


def launcher_for(backend: str) -> Launcher:
    """A new launcher hook of a backend."""
    launcher = launcher_class(backend)()
    if not isinstance(launcher, Launcher):  # a backend that does not keep the protocol fails here, not mid-launch
        raise TypeError(f"{type(launcher).__name__} does not implement the Launcher protocol")
    return launcher

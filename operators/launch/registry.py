"""The launch backends by name. Backends are named by import path and loaded on first use, so this module imports
none of them (no import cycle: a backend imports the base module, operators/launch/base.py, never this one) and a worker
only loads the client library of the backend a job uses.
"""

from __future__ import annotations

import importlib
from typing import Any

from operators.launch.base import DeferrableLauncher, LaunchRequest, Launcher
from operators.launch.declaration import BackendDeclaration
from operators.jobspec.names import BACKENDS

# One entry per name in BACKENDS (tests/operators/launch/test_registry.py): a name the spec accepts has a backend.
_BACKENDS = {
    "local": "operators.launch.local.launcher:LocalLauncherHook",
    "kubernetes": "operators.launch.kubernetes.launcher:KubernetesLauncherHook",
    "docker": "operators.launch.docker.launcher:DockerLauncherHook",
}


# Each backend's checks of a spec (check_options, check_reachable): operators/launch/checks.py runs them.
_CHECKS = {name: path.partition(".launcher:")[0] + ".checks" for name, path in _BACKENDS.items()}


# Each backend's declaration of what it can do (operators/launch/declaration.py), readable without its launcher.
_DECLARATIONS = {name: path.partition(".launcher:")[0] + ".declaration:DECLARATION" for name, path in _BACKENDS.items()}


# Each container backend's per-job options model: the spec's section of the backend's name (operators/jobspec/model.py
# validates it with the model given here; the local backend has none).
_OPTIONS = {
    "kubernetes": "operators.launch.kubernetes.options:KubernetesOptions",
    "docker": "operators.launch.docker.options:DockerOptions",
}


def _known(backend: str) -> str:
    if backend not in _BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}; set the spec's 'backend' field")
    return backend


def backend_checks(backend: str) -> Any:
    """The checks module of a backend (loaded on first use, as the backend itself)."""
    return importlib.import_module(_CHECKS[_known(backend)])


def declaration_for(backend: str) -> BackendDeclaration:
    """What a backend can do (its capabilities, queues, steps, cluster workspace), without importing its launcher."""
    return _load(_DECLARATIONS[_known(backend)])


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def option_models() -> dict[str, type]:
    """Backend name -> the pydantic model of its options section in the spec."""
    return {backend: _load(path) for backend, path in _OPTIONS.items()}


def launcher_class(backend: str) -> type:
    return _load(_BACKENDS[_known(backend)])


def trigger_for(launcher: DeferrableLauncher, request: LaunchRequest, **task: Any) -> Any:
    """The trigger that waits for `request`'s remote work, built from the launcher's primitives and the task's own
    (`task`: primitives only that only the operator knows) (the operator's side: a launcher never imports its
    trigger)."""
    return _load(launcher.trigger_class)(**launcher.trigger_arguments(request), **task)


def launcher_for(backend: str) -> Launcher:
    """A new launcher hook of a backend."""
    launcher = launcher_class(backend)()
    if not isinstance(launcher, Launcher):  # a backend that does not keep the protocol fails here, not mid-launch
        raise TypeError(f"{type(launcher).__name__} does not implement the Launcher protocol")
    return launcher

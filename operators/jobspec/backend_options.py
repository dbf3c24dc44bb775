"""The launch backends' names, and the names of each container backend's per-job options (the spec's backend options
section, passed to the launcher as LaunchRequest.options). Kept apart from the backends so that the spec, the
registry and one backend telling "another backend's option" from a typo need not import any backend.
"""

from __future__ import annotations

from operators.jobspec.parts import DockerOptions, KubernetesOptions

# The one list of backend names: the spec's `backend` field, the trigger form's dropdown and the launch registry.
BACKENDS = ("local", "kubernetes", "docker")

# Each container backend's option names: the fields of its options model (jobspec/parts.py), never typed twice.
KUBERNETES_OPTION_KEYS = tuple(KubernetesOptions.model_fields)
DOCKER_OPTION_KEYS = tuple(DockerOptions.model_fields)

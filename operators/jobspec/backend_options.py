"""The launch backends' names, and the names of each container backend's per-job options (the spec's backend options
section, passed to the launcher as LaunchRequest.options). Kept apart from the backends so that the spec, the
registry and one backend telling "another backend's option" from a typo need not import any backend.
"""

from __future__ import annotations

# The one list of backend names: the spec's `backend` field, the trigger form's dropdown and the launch registry.
BACKENDS = ("local", "kubernetes", "docker")

KUBERNETES_OPTION_KEYS = (
    "profile",
    "namespace",
    "workspace_pvc",
    "workspace_subpath",
    "service_account",
    "image_pull_policy",
    "image_pull_secrets",
    "priority_class",
    "node_selector",
    "tolerations",
    "keep_finished_jobs",
    "ttl_seconds_after_finished",
    "run_as_user",
    "security_context",
    "container_security_context",
    "labels",
    "annotations",
    "backoff_limit",
    "gpu_resource",
    "shm_size",
    "secret_env",
    "env_from_secrets",
    "image_pull_grace_seconds",
    "startup_timeout_seconds",
    "poll_interval",
    "propagation_policy",
    "queue",
    "queue_priority",
)

DOCKER_OPTION_KEYS = (
    "user",
    "shm_size",
    "keep_containers",
    "host_workspace",
    "image_pull_grace_seconds",
    "poll_interval",
    "stop_timeout",
    "secret_variables",
)

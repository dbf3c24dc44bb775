"""What every launch backend receives and returns, and how the launch stage picks a backend.

A backend is a hook with:
  hosts(job_name, instance_count) -> list[str]       host names written to resourceconfig.json
  host_addresses(job_name, instance_count) -> dict | None   name -> address where names don't resolve (local)
  run(request, on_line) -> LaunchResult              blocking: start (or reattach), stream logs, wait
  stop(request) -> None                              on_kill: stop the remote work, leave nothing behind
  mounts_channels: bool                              True: the backend mounts cache entries at input/data/<ch>
Deferrable backends (supports_defer = True) also have:
  start(request) -> None                             create (or reattach to) the remote work
  trigger(request) -> BaseTrigger                    waits in the triggerer
  result_from_event(request, event, on_line) -> LaunchResult
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

LineCallback = Callable[[str], None]

# Failure classes shared by all backends; the launch stage maps them to retry / no-retry.
USER_ERROR = "user_error"  # the script failed, or the job was refused as invalid: retrying won't help
PLATFORM_ERROR = "platform_error"  # our side or the infrastructure failed: retryable
TIMEOUT = "timeout"  # max_run_seconds reached
OOM = "oom_killed"
IMAGE_ERROR = "image_error"  # image cannot be pulled / is invalid: fail fast
EVICTED = "evicted"  # evicted or preempted: retryable, resumes from checkpoint

RETRYABLE_CLASSES = frozenset({PLATFORM_ERROR, EVICTED})


@dataclass(frozen=True)
class LaunchRequest:
    job_name: str
    job_root: str  # absolute path of the job root in the workspace (Airflow side)
    workspace: str  # workspace root; job_root and channel entries live under it
    layout: str
    instance_count: int
    hosts: tuple[str, ...]
    channel_entries: Mapping[str, str] = field(default_factory=dict)  # channel -> cache entry dir (absolute)
    image_uri: str | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)  # {"cpu": "2", "memory": "4Gi", "gpu": 0}
    max_run_seconds: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # backend-specific per-job options
    metric_definitions: tuple = ()  # [{"Name", "Regex"}]: for backends whose logs stream outside the worker

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["hosts"] = list(self.hosts)
        data["channel_entries"] = dict(self.channel_entries)
        data["resources"] = dict(self.resources)
        data["env"] = dict(self.env)
        data["options"] = dict(self.options)
        data["metric_definitions"] = [dict(m) for m in self.metric_definitions]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchRequest:
        values = dict(data)
        values["hosts"] = tuple(values.get("hosts") or ())
        values["metric_definitions"] = tuple(values.get("metric_definitions") or ())
        return cls(**values)


@dataclass(frozen=True)
class LaunchResult:
    succeeded: bool
    exit_code: int | None = None
    failure_reason: str | None = None
    failure_class: str | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)

    @property
    def retryable(self) -> bool:
        return self.failure_class in RETRYABLE_CLASSES


FAILURE_REASON_MAX_CHARS = 4000


def read_failure_reason(job_root: str) -> str | None:
    """The runtime's (or the user's) output/failure of a job root, trimmed to its last 4000 characters.

    Every layout keeps output/ at the root, so this holds for all of them.
    """
    try:
        with open(os.path.join(job_root, "output", "failure"), encoding="utf-8", errors="replace") as handle:
            text = handle.read(64 * 1024).strip()
    except OSError:
        return None
    if len(text) > FAILURE_REASON_MAX_CHARS:
        text = "..." + text[-FAILURE_REASON_MAX_CHARS:]
    return text or None


def clear_outcome_markers(job_root: str) -> None:
    """A fresh start must not be judged by the success/failure files of an earlier try."""
    for marker in ("success", "failure"):
        try:
            os.remove(os.path.join(job_root, "output", marker))
        except FileNotFoundError:
            pass


BACKENDS = ("local", "kubernetes", "docker")


def launcher_for(backend: str):
    """The launcher hook of a backend (imported lazily: each pulls in its own client library)."""
    if backend == "local":
        from operators.hooks.local_launcher import LocalLauncherHook

        return LocalLauncherHook()
    if backend == "kubernetes":
        from operators.hooks.kubernetes_launcher import KubernetesLauncherHook

        return KubernetesLauncherHook()
    if backend == "docker":
        from operators.hooks.docker_launcher import DockerLauncherHook

        return DockerLauncherHook()
    raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}; set the spec's 'backend' field")

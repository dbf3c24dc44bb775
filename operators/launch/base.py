"""The launch layer's base: what every backend receives and returns, what it must offer, and how exit codes
and registry answers map to failure classes. No backend is imported here (see operators/launch/registry.py).

Every backend implements :class:`Launcher`. Optional abilities are declared in its ``capabilities``
(a :class:`Capabilities`), never probed with hasattr: a backend declaring ``deferrable`` also implements
:class:`DeferrableLauncher` (start -> trigger -> result_from_event, waiting in the triggerer).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from training_runtime import errors as runtime_errors

LineCallback = Callable[[str], None]

# Failure classes shared by all backends, defined once by the runtime (training_runtime.errors); the launch stage
# maps them to retry / no-retry.
USER_ERROR = runtime_errors.USER_ERROR_CLASS  # the script failed, or the job was refused as invalid: no retry
PLATFORM_ERROR = runtime_errors.PLATFORM_ERROR_CLASS  # our side or the infrastructure failed: retryable
TIMEOUT = runtime_errors.TIMEOUT_CLASS  # max_run_seconds reached
OOM = runtime_errors.OOM_CLASS
IMAGE_ERROR = runtime_errors.IMAGE_ERROR_CLASS  # image cannot be pulled / is invalid: fail fast
EVICTED = runtime_errors.EVICTED_CLASS  # evicted or preempted: retryable, resumes from checkpoint
DISK_LIMIT = runtime_errors.DISK_LIMIT_CLASS  # the job root outgrew its disk cap: stopped, not retried

RETRYABLE_CLASSES = frozenset({PLATFORM_ERROR, EVICTED})

# The runtime's exit codes and their classes (training_runtime.errors): 1-3 are the user's to fix, 4 is ours,
# 137 is the OOM killer's SIGKILL.
USER_EXIT_CODES = tuple(code for code, cls in runtime_errors.EXIT_CLASSES.items() if cls == USER_ERROR)
PLATFORM_EXIT_CODE = runtime_errors.PLATFORM_ERROR
_EXIT_MEANINGS = {
    runtime_errors.USER_CODE_FAILED: "the training code failed",
    runtime_errors.INVALID_JOB: "the job was refused as invalid",
    runtime_errors.REQUIREMENTS_FAILED: "installing code/requirements.txt failed",
    runtime_errors.PLATFORM_ERROR: "the training runtime failed (platform error)",
    runtime_errors.MAX_RUN_EXCEEDED: "the training ran past max_run_seconds",
    runtime_errors.OUT_OF_MEMORY: "the training was killed (SIGKILL: out of memory, as a rule)",
}
DEFAULT_MASTER_PORT = 29500


def is_runtime_exit_code(code: int | None) -> bool:
    """An exit code `train` chose for a failure it diagnosed (1-4): output/failure says why, and among the hosts
    of a failed job it names the cause (the others are the peers stopped after it)."""
    return code is not None and 1 <= code <= PLATFORM_EXIT_CODE


def exit_failure_class(code: int | None) -> str:
    """The failure class of a non-zero exit code, as the runtime classifies it. "stopped" (train ended by a
    signal) is ours to judge: the launcher stopped it (timeout, early stop, a failed peer) or the platform did."""
    cls = runtime_errors.failure_class(code)
    return cls if cls in (USER_ERROR, OOM, TIMEOUT) else PLATFORM_ERROR


def describe_exit(code: int | None, otherwise: str = "the container was killed or crashed") -> str:
    """What a non-zero exit code of `train` means, in words."""
    return _EXIT_MEANINGS.get(code, otherwise)


# Registries answer a pull rate limit with HTTP 429 "toomanyrequests"; that is worth waiting out.
_RATE_LIMITED = re.compile(r"toomanyrequests|too many requests|\b429\b|rate limit|rate exceeded|pull qps", re.I)


def is_rate_limited(message: str) -> bool:
    """An image registry's "come back later" (retry for a while) rather than a definite refusal."""
    return bool(_RATE_LIMITED.search(message or ""))


_SHA256 = re.compile(r"(?:^|[@:])(?:sha256:)?([0-9a-f]{64})$")


def digest_hex(image_digest: str | None) -> str | None:
    """The sha256 hex an image digest names, whatever its form: "sha256:<hex>", "<repo>@sha256:<hex>", a pod's
    imageID with its runtime prefix ("docker-pullable://<repo>@sha256:<hex>", "docker://sha256:<hex>"), bare hex;
    None for anything else."""
    text = (image_digest or "").strip().lower()
    for prefix in ("docker-pullable://", "docker://", "containerd://"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    found = _SHA256.search(text)
    return found.group(1) if found else None


def same_image(actual: str | None, expected: str | None) -> bool:
    """Whether two image digests name the same image: their sha256 hex is equal (see digest_hex)."""
    hex_digest = digest_hex(actual)
    return hex_digest is not None and hex_digest == digest_hex(expected)


def image_mismatch(image: str, actual: str | None, expected: str) -> str:
    """The one line a pinned run that found another image fails with (IMAGE_ERROR)."""
    return (f"image {image} is {actual or 'unknown'}, not {expected} that the reproduced run ran; push or pull that "
            "image again (or point image_uri at it), or reproduce without pinning the image")


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
    # Elastic training (JobSpec.elastic_settings: {min_hosts, max_hosts, max_restarts}), or None: a lost host is
    # started again (Kubernetes: its pod replaced; docker: its container restarted) up to max_restarts times.
    elastic: Mapping[str, int] | None = None
    # {"dir", "uri", "job_root", "interval", "connections"} for backends that sync checkpoint_path in their own pods
    # while training runs (Kubernetes with the cluster's data plane); {} = the worker syncs, or no checkpoint_path.
    checkpoints: Mapping[str, Any] = field(default_factory=dict)
    # Secrets by reference, resolved at launch (operators/jobspec/secret_refs.py): never serialized (to_dict is what
    # a deferred task stores in the metadata DB), never printed (repr).
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    attempt: int = 1  # the launch task's try: a first one has nothing of its own to find in the cluster
    # Bytes the job root may hold (resources.disk, else [training] job_disk_limit: operators/launch/disk_cap.py);
    # a backend that can makes it a kernel limit (local: no file larger), the launch stage measures the whole root.
    disk_limit: int | None = None
    # The image the run must run, as an earlier run recorded it (LaunchResult.image_digest): a backend that finds
    # another one refuses the run (IMAGE_ERROR, see image_mismatch); None: whatever image_uri names now.
    expected_image_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("secret_env")
        data["hosts"] = list(self.hosts)
        data["channel_entries"] = dict(self.channel_entries)
        data["resources"] = dict(self.resources)
        data["env"] = dict(self.env)
        data["options"] = dict(self.options)
        data["metric_definitions"] = [dict(m) for m in self.metric_definitions]
        data["checkpoints"] = dict(self.checkpoints)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchRequest:
        values = dict(data)
        values["hosts"] = tuple(values.get("hosts") or ())
        values["metric_definitions"] = tuple(values.get("metric_definitions") or ())
        values.pop("secret_env", None)
        return cls(**values)


@dataclass(frozen=True)
class LaunchResult:
    succeeded: bool
    exit_code: int | None = None
    failure_reason: str | None = None
    failure_class: str | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    restarts: Mapping[str, int] = field(default_factory=dict)  # elastic jobs: host -> times it was started again
    # What the backend actually ran: Docker's image id ("sha256:<hex>"), the training pod's imageID
    # ("<repo>@sha256:<hex>" or "sha256:<hex>"); None where no image runs (local) or none was started.
    image_digest: str | None = None

    @property
    def retryable(self) -> bool:
        return self.failure_class in RETRYABLE_CLASSES


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the :class:`Launcher` protocol, declared by the backend."""

    deferrable: bool = False  # implements DeferrableLauncher: the wait can move to the triggerer
    mounts_channels: bool = False  # mounts cache entries at input/data/<channel> (else the stage links them)
    caps_file_size: bool = False  # the kernel refuses the job a file larger than LaunchRequest.disk_limit


@runtime_checkable
class Launcher(Protocol):
    """A launch backend: a hook that runs a LaunchRequest somewhere and reports a LaunchResult."""

    backend: str
    capabilities: Capabilities

    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        """Host names written to resourceconfig.json (what peers use to reach each other)."""

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str] | None:
        """name -> address where host names don't resolve (local), else None."""

    def master_port(self) -> int:
        """The port distributed launchers rendezvous on (MASTER_PORT)."""

    def run(self, request: LaunchRequest, on_line: LineCallback) -> LaunchResult:
        """Blocking: start (or reattach), stream the logs into on_line, wait, return the result."""

    def stop(self, request: LaunchRequest) -> None:
        """on_kill: stop the remote work and leave nothing behind; what is gone already is fine."""


@runtime_checkable
class DeferrableLauncher(Launcher, Protocol):
    """A backend with capabilities.deferrable: the wait happens in the triggerer."""

    @property
    def deferrable_default(self) -> bool:
        """Whether to defer when the operator does not say."""

    def start(self, request: LaunchRequest) -> None:
        """Create (or reattach to) the remote work."""

    # The trigger that waits for it, as "module:Class": the operator builds it (operators/launch/registry.py
    # trigger_for), the launcher never imports it (the trigger may use the backend's modules, never the reverse).
    trigger_class: str

    def trigger_arguments(self, request: LaunchRequest) -> dict[str, Any]:
        """The trigger's arguments: primitives only (they are serialized into the metadata DB)."""

    def result_from_event(self, request: LaunchRequest, event: Mapping[str, Any], on_line: LineCallback) -> LaunchResult:
        """The trigger's event -> the result (catching up the end of the logs into on_line)."""

    def queue_of(self, request: LaunchRequest) -> dict[str, str] | None:
        """{queue, priority} when the remote work waits in a scheduler's queue (Kueue), else None: the training-jobs
        view says "queued in <queue>" while the task is deferred."""

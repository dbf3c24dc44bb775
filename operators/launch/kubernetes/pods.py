"""Reading a training Job's pods: their host index, the training container's status, evictions and image-pull
errors. Pure functions over kubernetes client objects (sync or asyncio models alike), no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from operators.launch.base import is_rate_limited
from operators.launch.kubernetes.manifests import CONTAINER_NAME
from operators.launch.kubernetes.names import INDEX_ANNOTATION

FATAL_WAITING_REASONS = ("InvalidImageName", "ErrImageNeverPull")
PULL_WAITING_REASONS = ("ErrImagePull", "ImagePullBackOff")
MISSING_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found', re.I)
DEFINITE_PULL_ERROR = re.compile(r"not found|manifest unknown|does not exist|unauthorized|denied|invalid", re.I)
# CreateContainerConfigError says a Secret/ConfigMap (or a key of it) is missing, which no waiting cures, or that the
# kubelet's watch of one had not synced yet ("failed to sync secret cache: timed out waiting for the condition", on a
# loaded node, for a Secret created a moment before the pod), which the kubelet retries.
MISSING_CONFIG = re.compile(r"not found|couldn't find key|could not find key", re.I)


def config_error_is_permanent(message: str | None) -> bool:
    """Whether a CreateContainerConfigError's message names a missing object or key (see MISSING_CONFIG)."""
    return bool(MISSING_CONFIG.search(message or ""))


def pod_index(pod: Any) -> int:
    meta = pod.metadata
    value = (meta.annotations or {}).get(INDEX_ANNOTATION) or (meta.labels or {}).get(INDEX_ANNOTATION) or "0"
    return int(value)


def train_status(pod: Any) -> Any:
    for status in (pod.status and pod.status.container_statuses) or []:
        if status.name == CONTAINER_NAME:
            return status
    return None


def disruption(pod: Any) -> str | None:
    """Why the pod was evicted or preempted, or None."""
    status = pod.status
    if status is None:
        return None
    for condition in status.conditions or []:
        if condition.type == "DisruptionTarget" and condition.status == "True":
            return f"{condition.reason or 'disrupted'}: {condition.message or ''}".strip(": ")
    if status.reason == "Evicted":
        return f"Evicted: {status.message or ''}".strip(": ")
    return None


def pull_error_is_permanent(pod: Any) -> str | None:
    """The provider's judgement of image-pull errors, widened by the registry rate-limit answers it misses."""
    # lazy: Airflow; launch/ imports it at module level only in its hooks (test_import_graph)
    from airflow.providers.cncf.kubernetes.utils.pod_manager import detect_pod_terminate_early_issues

    message = detect_pod_terminate_early_issues(pod)
    if message and not is_rate_limited(message):
        return message
    return None


def not_started(pod: Any) -> str | None:
    """Why a pod that is on a node has not started its training container ("ContainerCreating", ...); None when
    it is not scheduled yet (waiting for capacity is no failure), has started, or waits on an image pull error or
    a missing Secret (failed apart, with their own messages)."""
    status = pod.status
    if status is None or status.phase != "Pending":
        return None
    scheduled = bool(pod.spec and pod.spec.node_name) or any(
        c.type == "PodScheduled" and c.status == "True" for c in status.conditions or [])
    if not scheduled:
        return None
    train = train_status(pod)
    waiting = train.state.waiting if train is not None and train.state is not None else None
    if train is not None and train.state is not None and waiting is None:
        return None  # running or terminated: the phase lags behind
    reason = (waiting.reason if waiting is not None else None) or "ContainerCreating"
    if reason in PULL_WAITING_REASONS or reason in FATAL_WAITING_REASONS:
        return None
    if reason == "CreateContainerConfigError" and config_error_is_permanent(waiting.message):
        return None  # failed apart; a config error that waiting may cure counts as not started
    return reason


def short_text(text: str | None, limit: int = 2000) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]

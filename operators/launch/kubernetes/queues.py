"""Kueue queues and priorities a training Job may use: the admin's lists ([training.kubernetes] queue, queues,
queue_priority, queue_priorities), and what a spec's `kubernetes.queue` / `kubernetes.queue_priority` may pick from
them. Pure functions, no I/O.

Which queue (a Kueue LocalQueue in the job's namespace, pointing at a team's ClusterQueue and its quota) and which
priority (a Kueue WorkloadPriorityClass: who preempts whom) a job gets is a share of the cluster: an admin's choice.
A triggering user picks only among the names an admin listed; with no queue configured Kueue is not used.
"""

from __future__ import annotations

from typing import Any, Mapping

from operators.launch.kubernetes.names import is_dns1123_label, is_dns1123_subdomain
from operators.launch.kubernetes.profiles import ProfileError


def _allowed(default: str, listed: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for name in (default, *listed) if name))


def _pick(options: Mapping[str, Any], key: str, default: str, listed: tuple[str, ...], setting: str) -> str:
    value = options.get(key)
    if value is None:
        return default
    value = str(value)
    allowed = _allowed(default, listed)
    if value == default:
        return value
    if value not in allowed:
        choices = f"use one of: {', '.join(allowed)}" if allowed else "this Airflow lists none"
        raise ProfileError(key, f"is {value!r}, not one of the admin's {setting} ({choices}; airflow.cfg "
                                f"[training.kubernetes] {setting})")
    return value


def queue_choice(options: Mapping[str, Any], settings: Any) -> tuple[str, str]:
    """(LocalQueue, WorkloadPriorityClass) of a job: its options over the admin's defaults; "" = none. A name not in
    the admin's lists -> ProfileError naming the option."""
    default_queue = str(getattr(settings, "queue", "") or "")
    queues = tuple(getattr(settings, "queues", ()) or ())
    queue = _pick(options, "queue", default_queue, queues, "queues")
    if queue and not is_dns1123_label(queue):
        raise ProfileError("queue", f"is {queue!r}, not a LocalQueue name; fix airflow.cfg [training.kubernetes] queue")
    default_priority = str(getattr(settings, "queue_priority", "") or "")
    priorities = tuple(getattr(settings, "queue_priorities", ()) or ())
    priority = _pick(options, "queue_priority", default_priority, priorities, "queue_priorities")
    if priority and not queue:
        raise ProfileError("queue_priority", f"is {priority!r} but the job is in no Kueue queue; name one in "
                                             "kubernetes.queue (or leave queue_priority out)")
    if priority and not is_dns1123_subdomain(priority):
        raise ProfileError("queue_priority", f"is {priority!r}, not a WorkloadPriorityClass name")
    return queue, priority

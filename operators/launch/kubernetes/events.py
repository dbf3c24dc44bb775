"""Warning events of a training Job and its pods: what the task log should say, and when Kubernetes refuses the
pods outright. Pure functions over kubernetes client objects, plus the one list call (needs `events: list`).

FailedCreate on the Job means the API refused a pod (Pod Security admission, a ResourceQuota, a missing
ServiceAccount or PriorityClass): the Job controller only retries with back-off and sets no condition, so
without this the task would wait until max_run_seconds.
"""

from __future__ import annotations

from typing import Any, Callable

from operators.launch.kubernetes.pods import short_text


async def list_warnings(core: Any, namespace: str) -> list[Any]:
    result = await core.list_namespaced_event(namespace=namespace, field_selector="type=Warning")
    return sorted(result.items or [], key=lambda e: str(e.last_timestamp or e.event_time or ""))


def read_warnings(
    events: list[Any], job_uid: str | None, pods: list[Any], instance_count: int, host: Callable[[str], str],
    job_name: str,
) -> tuple[str | None, list[tuple[str, str]]]:
    """(why the pods are refused, or None; [(once-key, line)] for the task log) from the namespace's warnings."""
    pod_names = {pod.metadata.uid: pod.metadata.name for pod in pods}
    notes: list[tuple[str, str]] = []
    for event in events:
        uid = event.involved_object.uid if event.involved_object else None
        message = (event.message or "").strip()
        if uid == job_uid and event.reason == "FailedCreate" and len(pods) < instance_count:
            return (f"Kubernetes refuses to create the pods of Job {job_name}: {short_text(message, 1500)}; fix the "
                    "job's options or the namespace (Pod Security, ResourceQuota, ServiceAccount, PriorityClass)",
                    notes)
        if uid == job_uid or uid in pod_names:
            where = f"Job {job_name}" if uid == job_uid else host(pod_names[uid])
            notes.append((f"event:{uid}:{event.reason}:{message[:200]}",
                          f"{where}: {event.reason}: {short_text(message, 500)}"))
    return None, notes

"""What Kueue says about a queued training Job, read from its Workload (kueue.x-k8s.io/v1beta2): pure functions over
the Workload objects as dicts (the custom-objects API's answer), no I/O.

A Job created with the queue label (operators/launch/kubernetes/manifests.py) stays suspended until Kueue admits its
Workload: every host's pods at once (the Workload has one pod set of `parallelism` pods) or none. While it waits
the watch (operators/launch/kubernetes/watch.py) reports `queued in <queue> (position N, waiting for ...)`:
- position: among the Workloads of the same LocalQueue in the namespace that have no quota yet, in Kueue's order
  (higher priority first, then older first, then by UID); the launcher's Role can list Workloads in its namespace
  only, so Workloads of other namespaces sharing the ClusterQueue are not counted;
- waiting for: Kueue's reason on the QuotaReserved condition (which resource, how much more is needed).
A Workload that can never fit (it asks more than the ClusterQueue's whole quota) fails at once, naming the quota.
An eviction by a higher-priority Workload is `preempted`: Kueue suspends the Job (its pods are deleted), queues it
again, and on its next admission every host starts afresh and resumes from the last checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PRIORITY_BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

_FLAVOR_PREFIX = re.compile(r"^couldn't assign flavors to pod set [^:]+: ")
# flavorassigner.go: "insufficient quota for cpu in flavor f, previously considered podsets requests (0) + current
# podset request (4) > maximum capacity (2)": more than the queue could ever give, whatever else finishes.
_NEVER_FITS = re.compile(r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^,]+), .*?"
                         r"current podset request \((?P<request>[^)]+)\) > maximum capacity \((?P<capacity>[^)]+)\)")
_UNUSED = re.compile(r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^,]+), "
                     r"(?P<more>\S+) more needed")


@dataclass(frozen=True)
class QueueStatus:
    """One reading of a queued Job's Workload. state: waiting (no Workload yet), queued, admitted, preempted,
    refused (can never fit), finished."""

    state: str
    message: str
    note: str | None = None  # said once: the eviction that put an admitted Job back in the queue


def conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}


def _true(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    condition = conditions(workload).get(kind)
    return condition if condition is not None and condition.get("status") == "True" else None


def has_quota(workload: Mapping[str, Any]) -> bool:
    return _true(workload, "QuotaReserved") is not None


def _order(workload: Mapping[str, Any]) -> tuple[int, str, str]:
    """Kueue's queue order (v0.17 pkg/cache/queue baseCompareFunc): higher effective priority (the priority-boost
    annotation added), then the earlier queue-order timestamp (creation, or the eviction by an admission check),
    then the smaller UID. Timestamps have whole seconds: jobs created within one second are ordered by UID, not
    by name (the position a watch said was wrong half the time for two jobs submitted together)."""
    meta = workload.get("metadata") or {}
    try:
        boost = int((meta.get("annotations") or {}).get(PRIORITY_BOOST_ANNOTATION) or 0)
    except ValueError:  # Kueue ignores a boost it cannot parse, too
        boost = 0
    priority = int((workload.get("spec") or {}).get("priority") or 0) + boost
    evicted = _true(workload, "Evicted")
    since = (evicted.get("lastTransitionTime") if evicted is not None and evicted.get("reason") == "AdmissionCheck"
             else meta.get("creationTimestamp"))
    return (-priority, since or "", meta.get("uid") or "")


def position(workload: Mapping[str, Any], workloads: Iterable[Mapping[str, Any]]) -> int:
    """1 + the pending Workloads of the same LocalQueue ahead of this one (see the module docstring)."""
    queue = (workload.get("spec") or {}).get("queueName")
    mine = _order(workload)
    ahead = [w for w in workloads
             if (w.get("spec") or {}).get("queueName") == queue and not has_quota(w)
             and _true(w, "Finished") is None and _order(w) < mine]
    return 1 + len(ahead)


def waiting_for(message: str) -> str:
    """Kueue's QuotaReserved message, said for a user: which resource, how much more."""
    text = _FLAVOR_PREFIX.sub("", (message or "").strip())
    unused = _UNUSED.search(text)
    if unused:
        return f"{unused['resource']}: {unused['more']} more than is free in flavor {unused['flavor']}"
    return text or "its turn"


def never_fits(message: str, queue: str, cluster_queue: str | None) -> str | None:
    """The refusal of a Workload larger than its queue's quota, or None."""
    match = _NEVER_FITS.search(message or "")
    if match is None:
        return None
    quota = f"ClusterQueue {cluster_queue}" if cluster_queue else f"the ClusterQueue of {queue}"
    return (f"the job asks for {match['request']} {match['resource']} but queue {queue}'s quota ({quota}, flavor "
            f"{match['flavor']}) is {match['capacity']} {match['resource']} in all, so it can never be admitted; lower "
            "instance_count or resources, or pick a queue with a larger quota (kubernetes.queue)")


def queue_status(workload: Mapping[str, Any] | None, workloads: Iterable[Mapping[str, Any]],
                 queue: str) -> QueueStatus:
    if workload is None:
        return QueueStatus("waiting", f"waiting for Kueue to queue the Job in {queue}")
    status = workload.get("status") or {}
    cluster_queue = (status.get("admission") or {}).get("clusterQueue")
    if _true(workload, "Finished") is not None:
        return QueueStatus("finished", "finished")
    evicted = _true(workload, "Evicted")
    note = None
    if evicted is not None and not has_quota(workload):
        why = evicted.get("reason") or "Evicted"
        kind = "preempted" if why == "Preempted" else "evicted"
        note = (f"{kind} in {queue} ({evicted.get('message') or why}); queued again, every host resumes from the last "
                "checkpoint when it is admitted")
    if _true(workload, "Admitted") is not None:
        flavors = sorted({f for ps in (status.get("admission") or {}).get("podSetAssignments") or []
                          for f in (ps.get("flavors") or {}).values()})
        where = f"ClusterQueue {cluster_queue}" + (f", flavor {', '.join(flavors)}" if flavors else "")
        return QueueStatus("admitted", f"admitted by Kueue in {queue} ({where}): every host starts now")
    if has_quota(workload):
        return QueueStatus("queued", f"quota reserved in {queue}, waiting for admission checks")
    reason = (conditions(workload).get("QuotaReserved") or {}).get("message") or ""
    if evicted is not None and reason == evicted.get("message"):
        reason = ""  # right after an eviction Kueue repeats its message here: not what the Job waits for
    refused = never_fits(reason, queue, cluster_queue)
    if refused:
        return QueueStatus("refused", refused)
    return QueueStatus("preempted" if note else "queued", f"queued in {queue} (position "
                       f"{position(workload, workloads)}, waiting for {waiting_for(reason)})", note)


def workload_of(job_uid: str, workloads: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for workload in workloads:
        if ((workload.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL) == job_uid:
            return workload
    return None

"""An elastic training Job's hosts as the watch sees them (operators/launch/kubernetes/watch.py): which host was lost
and when its replacement pod came, said once each in the task log.

A Job is elastic when it has ``backoffLimitPerIndex`` (operators/launch/kubernetes/manifests.py): the Job controller
replaces a host's failed, deleted or evicted pod (a new pod of the same index, hence the same host name) and torchrun
re-forms the group with it. A pod is called lost when it failed (not with a user error: that fails the Job at once) or
is being deleted, and a second poll still sees the Job going on: the Job controller also stops the pods of a Job it
fails, which is no lost host. An OOM-killed host is replaced like any other (the watch does not fail an elastic Job at
once on OOMKilled; a host past max_restarts fails it, and the failure says OOM). Pure bookkeeping, no I/O.
"""

from __future__ import annotations

from typing import Any, Callable

from operators.launch.base import USER_EXIT_CODES
from operators.launch.kubernetes.pods import train_status


class ElasticHosts:
    def __init__(self) -> None:
        self.restarts_per_host: int | None = None  # the Job's backoffLimitPerIndex; None: not elastic
        self.index_pods: dict[int, list[str]] = {}  # index -> its pods in the order seen
        self.lost: set[str] = set()  # pods said lost
        self.maybe_lost: set[str] = set()  # seen failed or deleted once
        self.ending = False  # the Job is failing: the Job controller stops its pods

    @property
    def enabled(self) -> bool:
        return self.restarts_per_host is not None

    def read_job(self, job: Any, conditions: dict[str, Any]) -> None:
        per_index = getattr(job.spec, "backoff_limit_per_index", None) if job.spec is not None else None
        self.restarts_per_host = per_index if isinstance(per_index, int) else None
        self.ending = "Failed" in conditions or "FailureTarget" in conditions

    def suspended(self) -> None:
        """Kueue suspended the Job (preemption): the pods it deleted are not restarts of their hosts."""
        self.index_pods.clear()

    def restarts(self, name: str) -> dict[str, int]:
        """Host -> how often a replacement pod started it again (the Job `name`'s hosts are `<name>-<index>`)."""
        return {f"{name}-{index}": len(pods) - 1 for index, pods in sorted(self.index_pods.items()) if len(pods) > 1}

    def in_order(self, pods: list[Any]) -> list[Any]:
        """An elastic Job's pods with replacements after the pods they replace; other Jobs' as they are."""
        if not self.enabled:
            return pods
        return sorted(pods, key=lambda p: str(getattr(p.metadata, "creation_timestamp", None) or ""))

    def observe(self, pod: Any, index: int, host: str, say: Callable[[str], None]) -> None:
        if not self.enabled:
            return
        name = pod.metadata.name
        seen = self.index_pods.setdefault(index, [])
        if name not in seen:
            seen.append(name)
            if len(seen) > 1:
                say(f"elastic: {host} restarted: replacement pod {name} (restart {len(seen) - 1} of this host, at "
                    f"most {self.restarts_per_host}); the group re-forms with it and resumes from the last checkpoint")
        if name in self.lost or self.ending:
            return
        status = train_status(pod)
        terminated = status.state.terminated if status and status.state else None
        failed = (terminated is not None and terminated.exit_code) or (pod.status and pod.status.phase == "Failed")
        deleted = getattr(pod.metadata, "deletion_timestamp", None) is not None and not (
            terminated is not None and not terminated.exit_code)
        if (not failed and not deleted) or (terminated is not None and terminated.exit_code in USER_EXIT_CODES):
            return  # a user error fails the Job at once (podFailurePolicy): the failure says why
        if name not in self.maybe_lost:
            self.maybe_lost.add(name)  # the next poll tells a lost host from the pods of a Job being failed
            return
        self.lost.add(name)
        if terminated is not None and terminated.exit_code:
            why = f"exit code {terminated.exit_code}" + (f", {terminated.reason}" if terminated.reason else "")
        else:
            why = "its pod is being deleted"
        say(f"elastic: {host} lost (pod {name}: {why}); the other hosts go on or wait for it, Kubernetes starts a "
            "replacement unless the job fails")

"""A job root's disk cap: the most it may hold, on every backend.

The cap is the spec's `resources.disk`, else the admin's `[training] job_disk_limit` (also the most a spec may ask
for: more is refused in validate_spec, naming the field). What counts is what the disk counts: allocated blocks,
each file once however many names it has (operators/fs/usage.py).

How it is held, as far as each machine allows (docs/operations.md):
- the kernel, per file: the local backend runs the job with RLIMIT_FSIZE at the cap (operators/launch/local/
  isolation.py), so no single file can outgrow it, however fast it is written;
- the whole job root, by measuring: while the job runs where this worker sees its job root (local, docker, a
  Kubernetes shared volume), `DiskCapWatch` measures it every few seconds (less often when a walk is slow: at most
  WALK_SHARE of the time goes into walking) and stops the job over the cap; the launch stage measures once more when
  it ends, so a job that wrote past its cap between two looks fails all the same. A per-job file system (a loop
  image or a quota) would make it a kernel limit too; this worker has none, and the task log says so;
- not at all where the job root lives in the cluster's volume (Kubernetes, the cluster data plane): the volume's own
  quota is the limit there, and the task log says so.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from operators.fs.usage import MAX_DEPTH, TreeUsage, tree_usage
from operators.jobspec.errors import SpecError
from operators.quantities import parse_quantity
from operators.storage.disk_space import human

log = logging.getLogger(__name__)

CHECK_SECONDS = 5.0  # between two measurements of a job root, at least
WALK_SHARE = 0.05  # of the worker's time, at most, spent walking a job root (a tree of millions of files walks slowly)


def job_disk_cap(disk: str | None, admin_limit: str) -> int | None:
    """The job root's cap in bytes: the spec's resources.disk, else the admin's job_disk_limit; None = no cap."""
    value = disk or admin_limit
    return int(parse_quantity(value)) if value else None


def check_disk_request(disk: str | None, admin_limit: str) -> None:
    """SpecError naming resources.disk when the spec asks for more than the admin's cap."""
    if disk and admin_limit and parse_quantity(disk) > parse_quantity(admin_limit):
        raise SpecError("resources.disk", f"{disk} is more than a job root may hold here ({admin_limit}, [training] "
                        f"job_disk_limit); ask for at most {admin_limit}")


def over_cap(usage: TreeUsage, cap: int) -> str | None:
    """The failure line when `usage` breaks the cap, else None."""
    if usage.too_deep:
        return (f"the job root nests directories more than {MAX_DEPTH} levels deep, so its disk use cannot be checked "
                f"against its cap of {human(cap)}: the job was stopped; keep its directory tree shallower")
    if usage.bytes > cap:
        return (f"the job root holds {human(usage.bytes)}, more than its disk cap of {human(cap)} (resources.disk, "
                "else [training] job_disk_limit): the job was stopped; write less (fewer or smaller checkpoints and "
                "outputs) or ask for more resources.disk within the admin's limit")
    return None


def measure(job_root: str, cap: int) -> str | None:
    """over_cap of the job root as it is now (None too when it is not there)."""
    try:
        return over_cap(tree_usage(job_root), cap)
    except FileNotFoundError:
        return None


class DiskCapWatch:
    """Measures a job root in a thread while the job runs; calls `on_over(line)` once, the first time it is over."""

    def __init__(self, job_root: str, cap: int, on_over: Callable[[str], None], *, every: float = CHECK_SECONDS):
        self.job_root, self.cap, self.on_over, self.every = job_root, cap, on_over, every
        self.over: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"disk-cap-{job_root}", daemon=True)

    def start(self) -> DiskCapWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        wait = self.every
        while not self._done.wait(wait):
            started = time.monotonic()
            try:
                line = measure(self.job_root, self.cap)
            except OSError as err:  # the worker's own trouble (descriptors, I/O): say so, keep the job
                log.warning("Could not measure job root %s against its disk cap: %s", self.job_root, err)
                line = None
            took = time.monotonic() - started
            wait = max(self.every, took / WALK_SHARE)
            if line is not None:
                self.over = line
                self.on_over(line)
                return

"""What a local job may take: per host a cgroup of its own with the spec's memory and CPU (or the admin's defaults),
and at most [training] local_pids_limit tasks.

Each host's process tree runs in `training/<job_name>-<digest of its job root>/<host>` of the memory, cpu, cpuacct
and pids controllers (cgroup v1, as on this machine and its Docker engine) or of the unified hierarchy (v2, the
controllers enabled on the way down), joined before the sandbox starts, so everything the job starts is inside and
nothing it does can leave (no capabilities, and the groups are root's). Memory: memory.limit_in_bytes (and memsw, so
swap is no way round it) / memory.max; CPU: a CFS quota of `cpu` cores per 100 ms period; tasks: pids.max (threads
count). A host over its memory
is OOM-killed by the kernel: the group's oom_kill counter tells the launcher it was the limit (`oom_killed`), and
`train` reads its own limit to say so. The runtime's system metrics read the same groups (/proc/self/cgroup).

Where the worker cannot create cgroups (not root, no cgroup file system, v2 without the controllers delegated), jobs
run without these limits: the launcher says so once in the task log (docs/security.md says what is lost).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from operators.quantities import parse_quantity

log = logging.getLogger(__name__)

CGROUP_ROOT = "/sys/fs/cgroup"
PARENT = "training"
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")
CFS_PERIOD_US = 100_000


class LimitError(ValueError):
    """A spec asks for more than the admin allows: `field` names it."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None
    cpu: float | None
    pids: int | None

    def describe(self) -> str:
        parts = []
        if self.memory_bytes:
            parts.append(f"memory {self.memory_bytes / 2**20:.0f} MiB")
        if self.cpu:
            parts.append(f"cpu {self.cpu:g}")
        if self.pids:
            parts.append(f"{self.pids} tasks")
        return ", ".join(parts) or "no limits"


def limits_for(resources: dict, settings) -> Limits:
    """The limits of one host: the spec's resources, else the admin's defaults (raises LimitError above a maximum)."""
    check_resources(resources, settings)
    memory = resources.get("memory") or settings.local_default_memory
    cpu = resources.get("cpu") or settings.local_default_cpu
    return Limits(int(parse_quantity(memory)) if memory else None, float(parse_quantity(cpu)) if cpu else None,
                  settings.local_pids_limit or None)


def check_resources(resources: dict, settings) -> None:
    """Refuse a spec asking for more memory or CPU than [training] local_max_memory / local_max_cpu."""
    for key, maximum, setting in (("memory", settings.local_max_memory, "local_max_memory"),
                                  ("cpu", settings.local_max_cpu, "local_max_cpu")):
        value = resources.get(key)
        if value and maximum and parse_quantity(value) > parse_quantity(maximum):
            raise LimitError(f"resources.{key}", f"{value} is more than the local backend allows per host ({maximum},"
                             f" [training] {setting}); ask for at most {maximum} or use another backend")


def _is_v2(root: str) -> bool:
    return os.path.exists(os.path.join(root, "cgroup.controllers"))


class HostCgroup:
    """One host's groups (a directory per v1 controller, or one v2 directory)."""

    def __init__(self, directories: list[str], v2: bool):
        self.directories, self.v2 = directories, v2

    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.directories]

    def join(self) -> None:
        """Move the calling process in (a Popen preexec_fn: only os calls, nothing that takes a lock)."""
        for path in self.procs_files():
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # "0": the writing process itself, in v1 and v2
            finally:
                os.close(fd)

    def _memory_dir(self) -> str | None:
        return next((d for d in self.directories if self.v2 or f"{os.sep}memory{os.sep}" in d), None)

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this group (v1 memory.oom_control, v2 memory.events)."""
        directory = self._memory_dir()
        if directory is None:
            return 0
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        except OSError:
            pass
        return 0

    def remove(self) -> None:
        """Remove the (empty) groups and the job's parent once no host uses it."""
        for directory in self.directories:
            for path in (directory, os.path.dirname(directory)):
                try:
                    os.rmdir(path)
                except OSError:
                    break  # still has processes or another host's group: the last host removes it


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def create(job_name: str, host: str, limits: Limits, root: str = CGROUP_ROOT) -> HostCgroup:
    """The host's groups with `limits` set; OSError when the worker cannot make them."""
    if _is_v2(root):
        return _create_v2(job_name, host, limits, root)
    directories = []
    for controller in V1_CONTROLLERS:
        base = os.path.join(root, controller)
        if not os.path.isdir(base):
            raise OSError(f"no {controller} cgroup hierarchy at {base}")
        directory = os.path.join(base, PARENT, job_name, host)
        os.makedirs(directory, exist_ok=True)
        directories.append(directory)
    memory, cpu, _, pids = directories
    if limits.memory_bytes:
        _write(os.path.join(memory, "memory.limit_in_bytes"), str(limits.memory_bytes))
        if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
            _write(os.path.join(memory, "memory.memsw.limit_in_bytes"), str(limits.memory_bytes))
    if limits.cpu:
        _write(os.path.join(cpu, "cpu.cfs_period_us"), str(CFS_PERIOD_US))
        _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(max(1000, int(limits.cpu * CFS_PERIOD_US))))
    if limits.pids:
        _write(os.path.join(pids, "pids.max"), str(limits.pids))
    return HostCgroup(directories, v2=False)


def _create_v2(job_name: str, host: str, limits: Limits, root: str) -> HostCgroup:
    path = root
    for name in (PARENT, job_name, host):  # enable the controllers on the way down (no processes live there)
        _write(os.path.join(path, "cgroup.subtree_control"), "+memory +cpu +pids")
        path = os.path.join(path, name)
        os.makedirs(path, exist_ok=True)
    if limits.memory_bytes:
        _write(os.path.join(path, "memory.max"), str(limits.memory_bytes))
        if os.path.exists(os.path.join(path, "memory.swap.max")):
            _write(os.path.join(path, "memory.swap.max"), "0")
    if limits.cpu:
        _write(os.path.join(path, "cpu.max"), f"{max(1000, int(limits.cpu * CFS_PERIOD_US))} {CFS_PERIOD_US}")
    if limits.pids:
        _write(os.path.join(path, "pids.max"), str(limits.pids))
    return HostCgroup([path], v2=True)


def existing(job_name: str, host: str, root: str = CGROUP_ROOT) -> HostCgroup | None:
    """The host's groups an earlier attempt made (a retry reattaching reads their OOM count and removes them)."""
    if _is_v2(root):
        path = os.path.join(root, PARENT, job_name, host)
        return HostCgroup([path], v2=True) if os.path.isdir(path) else None
    directories = [os.path.join(root, c, PARENT, job_name, host) for c in V1_CONTROLLERS]
    return HostCgroup(directories, v2=False) if all(os.path.isdir(d) for d in directories) else None


def cgroups_available(root: str = CGROUP_ROOT) -> str | None:
    """None when this worker can make the groups, else why not (one line, for the task log)."""
    if os.geteuid() != 0:
        return "the worker is not root"
    if not os.path.isdir(root):
        return f"no cgroup file system at {root}"
    if _is_v2(root):
        with open(os.path.join(root, "cgroup.controllers")) as f:
            missing = {"memory", "cpu", "pids"} - set(f.read().split())
        return f"cgroup v2 lacks the {', '.join(sorted(missing))} controller(s)" if missing else None
    missing = [c for c in V1_CONTROLLERS if not os.path.isdir(os.path.join(root, c))]
    return f"no {', '.join(missing)} cgroup hierarchy" if missing else None


def remove_job(job_name: str, root: str = CGROUP_ROOT) -> None:
    """Remove what is left of the job's groups (all its processes ended)."""
    bases = [root] if _is_v2(root) else [os.path.join(root, c) for c in V1_CONTROLLERS]
    for base in bases:
        job_dir = os.path.join(base, PARENT, job_name)
        if not os.path.isdir(job_dir):
            continue
        for entry in os.scandir(job_dir):
            if entry.is_dir(follow_symlinks=False):
                try:
                    os.rmdir(entry.path)
                except OSError:
                    pass
        try:
            os.rmdir(job_dir)
        except OSError:
            pass


"""Who a local job runs as and what it may take, set up before its processes start and undone when it is reported.

- **A uid of its own** (a root worker): bubblewrap builds the sandbox as root, then setpriv becomes a uid of
  [training] local_uid_range held by this job alone (operators/launch/worker_slots.py), with no groups, no
  capabilities and no_new_privs; the job root is given to that uid first. The kernel then refuses it what it refuses
  any other user: sysctls, root's files (/etc/shadow, the secrets file), other jobs' files and processes. A non-root
  worker's bubblewrap maps the worker's own uid (never root) and needs nothing else.
- **Defence in depth**: a minimal /etc with passwd and group of its own, /proc and /sys masked as container runtimes
  mask them (sandbox.py), and a seccomp filter (syscalls.py).
- **Limits**: a cgroup per host with the spec's memory and CPU, or the admin's defaults, and a pids limit (limits.py);
  no file the job writes may grow past its disk cap (RLIMIT_FSIZE: the kernel's per-file limit, the one this machine
  has for disk without a file system per job; the launch stage measures the whole job root: launch/disk_cap.py).
- **GPUs**: the job's own devices (operators/launch/worker_slots.py); only their nodes are in its /dev, CUDA numbers
  them 0..n-1.
"""

from __future__ import annotations

import hashlib
import logging
import os
import resource
from typing import Callable

from operators.launch import worker_slots as slots
from operators.launch.local import limits, syscalls
from operators.launch.local.sandbox import account_files
from operators.fs.job_root import JobRoot

log = logging.getLogger(__name__)

SECCOMP_FILE = "seccomp.bpf"  # in the job's launch state directory


class JobIsolation:
    def __init__(self, settings, sandboxed: bool):
        self.settings, self.sandboxed = settings, sandboxed
        self.slots = slots.Slots(None)
        self.cgroups: dict[str, limits.HostCgroup] = {}
        self.limits: limits.Limits | None = None
        self.accounts: dict[str, str] = {}
        self.seccomp_path: str | None = None
        self.file_size_limit: int | None = None
        self._claimed = False

    def prepare(self, request, launch_dir: str, start: bool = True) -> None:
        """Claim the uid and GPUs, give the job root away, write /etc's accounts and the seccomp filter, make the
        hosts' cgroups. start=False (a retry reattaching): only find what the earlier attempt set up."""
        self.limits = limits.limits_for(dict(request.resources), self.settings)
        self.file_size_limit = request.disk_limit
        root_worker = os.geteuid() == 0
        wanted_gpus = int(request.resources.get("gpu") or 0)
        self.slots = slots.claim(request.workspace, request.job_name,
                                 self.settings.local_uid_range if root_worker and self.sandboxed else None,
                                 wanted_gpus, slots.gpu_devices(self.settings.local_gpu_devices))
        self._claimed = True
        if not start:
            self.cgroups = {h: g for h in request.hosts if (g := limits.existing(cgroup_name(request), h)) is not None}
            return
        if self.slots.uid is not None:
            changed = JobRoot(request.job_root).give_to(self.slots.uid, self.slots.uid)
            log.info("User code of %s runs as uid %d (the job root's %d entries given to it)", request.job_name,
                     self.slots.uid, changed)
        if self.slots.gpus:
            log.info("GPUs %s are this job's", ", ".join(self.slots.gpus))
        if self.sandboxed:
            uid = self.slots.uid if self.slots.uid is not None else os.getuid()
            gid = self.slots.uid if self.slots.uid is not None else os.getgid()
            self.accounts = account_files(launch_dir, uid, gid)
            self.seccomp_path = syscalls.write_filter(os.path.join(launch_dir, SECCOMP_FILE))
        self._make_cgroups(request)

    def _make_cgroups(self, request) -> None:
        problem = limits.cgroups_available()
        if problem:
            log.warning("No cgroup limits for this job (%s): its memory, CPU and tasks are not limited", problem)
            return
        try:
            for host in request.hosts:
                self.cgroups[host] = limits.create(cgroup_name(request), host, self.limits)
        except OSError as err:
            log.warning("No cgroup limits for this job (cannot create its cgroups: %s): its memory, CPU and tasks are "
                        "not limited", err)
            self.cgroups = {}
            return
        log.info("Limits per host of %s: %s", request.job_name, self.limits.describe())

    def run_as(self) -> tuple[int, int] | None:
        return (self.slots.uid, self.slots.uid) if self.slots.uid is not None else None

    def preexec(self, host: str) -> Callable[[], None] | None:
        """Run in the host's process before it execs: into its cgroup, and its files capped at the job's disk cap (a
        write past it fails with EFBIG, or SIGXFSZ ends a program that does not ignore it). Only system calls: this
        runs between fork and exec."""
        group = self.cgroups.get(host)
        file_size = self.file_size_limit

        def before_exec() -> None:
            if group is not None:
                group.join()
            if file_size:
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

        return before_exec if group is not None or file_size else None

    def environment(self) -> dict[str, str]:
        """CUDA's view of the job's GPUs: in the sandbox only its device nodes exist, numbered 0..n-1 by CUDA;
        unsandboxed, their numbers on the worker. No GPU: none visible."""
        if self.sandboxed:
            visible = ",".join(str(i) for i in range(len(self.slots.gpus)))
        else:
            visible = ",".join(str(slots.device_number(d)) for d in self.slots.gpus)
        return {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible or "void",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def record_holders(self, request, records) -> None:
        """The sandboxes now hold the job's uid and GPUs (they stay its own while one runs, whatever its worker)."""
        if self._claimed:
            slots.record_holders(request.workspace, request.job_name, records)

    def oom_killed(self) -> bool:
        return any(group.oom_kills() > 0 for group in self.cgroups.values())

    def release(self, request) -> None:
        """The job was reported: its groups (empty now) go, its uid and GPUs are free for the next job."""
        for group in self.cgroups.values():
            group.remove()
        limits.remove_job(cgroup_name(request))
        if self._claimed:
            slots.release(request.workspace, request.job_name)


def cgroup_name(request) -> str:
    """The job's group under training/: its name and its job root's digest (job names are unique in a workspace, not
    on a machine: two deployments, or two test workspaces, may both run a job "train")."""
    return f"{request.job_name}-{hashlib.sha256(os.path.realpath(request.job_root).encode()).hexdigest()[:12]}"

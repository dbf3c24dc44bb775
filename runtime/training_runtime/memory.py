"""What the kernel says about memory: the OOM-kill counter and the memory limit
of the cgroup ``train`` runs in (cgroup v2 or v1), for classifying a failure.

Every function returns None when the information is not available (not
Linux, no memory controller, unreadable files): the classification then rests
on the exit signal alone.
"""

import os

CGROUP_ROOT = "/sys/fs/cgroup"


def _cgroup_dirs(controller, cgroup_root=CGROUP_ROOT, proc_cgroup="/proc/self/cgroup"):
    """Candidate directories of our cgroup for `controller` (v1 hierarchy name, e.g. memory or cpuacct), most
    specific first: the v2 group, the mount itself (a container's cgroup namespace hides the path), the v1 group."""
    v2, v1 = [], []
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.lstrip("/")
        if controllers == "":
            v2.append(os.path.join(cgroup_root, path))
        elif controller in controllers.split(","):
            v1.append(os.path.join(cgroup_root, controllers, path))
    return v2 + [cgroup_root] + v1 + [os.path.join(cgroup_root, controller)]


def _memory_cgroup_dirs(cgroup_root=CGROUP_ROOT, proc_cgroup="/proc/self/cgroup"):
    return _cgroup_dirs("memory", cgroup_root, proc_cgroup)


def oom_kill_count(cgroup_root=CGROUP_ROOT, proc_cgroup="/proc/self/cgroup"):
    """How many processes the OOM killer has killed in our memory cgroup."""
    for directory in _memory_cgroup_dirs(cgroup_root, proc_cgroup):
        # v2: memory.events "oom_kill N"; v1: memory.oom_control "oom_kill N".
        for name in ("memory.events", "memory.oom_control"):
            value = _field(os.path.join(directory, name), "oom_kill")
            if value is not None:
                return value
    return None


def memory_limit(cgroup_root=CGROUP_ROOT, proc_cgroup="/proc/self/cgroup"):
    """Our memory cgroup's limit in bytes (None when unlimited or unknown)."""
    for directory in _memory_cgroup_dirs(cgroup_root, proc_cgroup):
        for name in ("memory.max", "memory.limit_in_bytes"):
            try:
                with open(os.path.join(directory, name)) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text == "max" or not text.isdigit():
                return None
            limit = int(text)
            # v1 reports "no limit" as a huge page-aligned number.
            return None if limit >= 1 << 60 else limit
    return None


def describe_limit(limit):
    if limit is None:
        return ""
    return "memory limit %.0f MiB" % (limit / (1024 * 1024))


def _field(path, key):
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit():
                    return int(value)
    except OSError:
        return None
    return None

"""System metrics beside the training's own: CPU and memory of the cgroup ``train`` runs in (and every GPU that
``nvidia-smi`` reports, where it exists), sampled every few seconds while the user code runs and appended to the
job's metrics stream, ``output/metrics.jsonl`` (the file TRAINING_METRICS_FILE names), one JSON line per point:

    {"name": "system/algo-1/cpu_percent", "value": 187.5, "step": 12, "timestamp": 1795000000.0}

Names are ``system/<host>/<what>``: cpu_percent (100 = one core busy), memory_bytes, memory_percent (of the
cgroup's limit, when it has one), gpu<i>_utilization_percent, gpu<i>_memory_bytes, gpu<i>_memory_percent. The worker
reads the file like any script-written point (operators/tracking/metrics.py), so the job page and MLflow get them too.

In a container (docker, kubernetes) the cgroup is the host's container; on the local backend each host has a cgroup
of its own (operators/launch/local/limits.py), so the figures are the host's, not the worker's. ``TRAINING_SYSTEM_METRICS_SECONDS`` sets the
interval (default 5; 0 turns sampling off). Nothing here may fail a training: a sample that cannot be read is
skipped.

On a GPU machine, the GPU part alone: ``python -m training_runtime.system_metrics gpu``.
"""

import json
import logging
import os
import shutil
import subprocess
import sys
import time

from training_runtime import memory
from training_runtime.contract import METRICS_STREAM
from training_runtime.periodic import Periodic

log = logging.getLogger(__name__)

DEFAULT_SECONDS = 5.0
GPU_QUERY = ("nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total",
             "--format=csv,noheader,nounits")


def interval(environ):
    """Seconds between samples from TRAINING_SYSTEM_METRICS_SECONDS (default 5, 0 = off)."""
    raw = (environ.get("TRAINING_SYSTEM_METRICS_SECONDS") or "").strip()
    try:
        value = float(raw) if raw else DEFAULT_SECONDS
    except ValueError:
        log.warning("TRAINING_SYSTEM_METRICS_SECONDS=%r is not a number: sampling every %g s", raw, DEFAULT_SECONDS)
        return DEFAULT_SECONDS
    return max(value, 0.5) if value > 0 else 0.0


def cpu_usage_seconds(cgroup_root=memory.CGROUP_ROOT, proc_cgroup="/proc/self/cgroup"):
    """CPU seconds the cgroup has used (cgroup v2 cpu.stat usage_usec, v1 cpuacct.usage); None when unknown."""
    v2 = [d for d in memory._memory_cgroup_dirs(cgroup_root, proc_cgroup) if "/memory" not in d[len(cgroup_root):]]
    for directory in v2:
        usec = memory._field(os.path.join(directory, "cpu.stat"), "usage_usec")
        if usec is not None:
            return usec / 1e6
    v1 = memory._cgroup_dirs("cpuacct", cgroup_root, proc_cgroup)[len(v2) + 1:]  # our own group, then the mount
    for directory in v1 + [os.path.join(cgroup_root, "cpu,cpuacct")]:
        try:
            with open(os.path.join(directory, "cpuacct.usage")) as f:
                return int(f.read().strip()) / 1e9
        except (OSError, ValueError):
            continue
    return None


def memory_bytes(cgroup_root=memory.CGROUP_ROOT, proc_cgroup="/proc/self/cgroup"):
    """Memory the cgroup uses now (v2 memory.current, v1 memory.usage_in_bytes); None when unknown."""
    for directory in memory._memory_cgroup_dirs(cgroup_root, proc_cgroup):
        for name in ("memory.current", "memory.usage_in_bytes"):
            try:
                with open(os.path.join(directory, name)) as f:
                    return int(f.read().strip())
            except (OSError, ValueError):
                continue
    return None


def gpu_sample(run=subprocess.run):
    """{gpu<i>_utilization_percent, gpu<i>_memory_bytes, gpu<i>_memory_percent} from nvidia-smi; {} when there is
    no nvidia-smi or it fails."""
    if shutil.which(GPU_QUERY[0]) is None:
        return {}
    try:
        out = run(list(GPU_QUERY), capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as error:
        log.debug("nvidia-smi failed: %s", error)
        return {}
    sample = {}
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        try:
            index, utilization, used_mib, total_mib = int(fields[0]), float(fields[1]), float(fields[2]), \
                float(fields[3])
        except ValueError:  # "[N/A]" on GPUs that do not report a field
            continue
        sample["gpu%d_utilization_percent" % index] = utilization
        sample["gpu%d_memory_bytes" % index] = used_mib * 1024 * 1024
        if total_mib > 0:
            sample["gpu%d_memory_percent" % index] = 100.0 * used_mib / total_mib
    return sample


class Sampler(Periodic):
    """Samples every ``seconds`` between :meth:`start` and :meth:`stop` (the first sample is the CPU baseline),
    appending points to ``path`` (opened for append each time: the user script appends to the same file)."""

    thread_name = "system-metrics"

    def __init__(self, path, host, seconds=DEFAULT_SECONDS, clock=time.monotonic, gpus=gpu_sample):
        super().__init__(seconds)
        self.path = path
        self.host = host
        self._clock = clock
        self._gpus = gpus
        self._step = 0
        self._last_cpu = None  # (cpu seconds, clock) of the previous sample

    def sample(self):
        """One sample: {what: value}."""
        values = {}
        cpu, now = cpu_usage_seconds(), self._clock()
        if cpu is not None:
            if self._last_cpu is not None and now > self._last_cpu[1]:
                values["cpu_percent"] = max(0.0, 100.0 * (cpu - self._last_cpu[0]) / (now - self._last_cpu[1]))
            self._last_cpu = (cpu, now)
        used = memory_bytes()
        if used is not None:
            values["memory_bytes"] = float(used)
            limit = memory.memory_limit()
            if limit:
                values["memory_percent"] = 100.0 * used / limit
        values.update(self._gpus())
        return values

    def write(self, values):
        if not values:
            return
        stamp = time.time()
        lines = "".join(json.dumps({"name": "system/%s/%s" % (self.host, what), "value": round(value, 3),
                                    "step": self._step, "timestamp": round(stamp, 3)}) + "\n"
                        for what, value in sorted(values.items()))
        self._step += 1
        # One write of whole lines with O_APPEND: the script's own lines are never cut in two.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)

    def first(self):
        self.sample()

    def tick(self):
        self.write(self.sample())


def start(root, host, environ):
    """The sampler of this host's run (started), or None when sampling is off or output/ is missing."""
    seconds = interval(environ)
    path = os.path.join(root, METRICS_STREAM)
    if not seconds or not os.path.isdir(os.path.dirname(path)):
        return None
    return Sampler(path, host, seconds).start()


if __name__ == "__main__":
    if sys.argv[1:] != ["gpu"]:
        sys.exit("usage: python -m training_runtime.system_metrics gpu")
    print(json.dumps(gpu_sample(), indent=2, sort_keys=True))

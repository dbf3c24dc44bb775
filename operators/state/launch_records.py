"""The local backend's launch records: which processes run a job's hosts, kept in its state directory.

A training outlives the task process that launched it (a retry reattaches), so its pids are written down:
`<state dir>/launch-pids.json`, `[[pid, create time], ...]` in host order, where user code cannot write
(operators/state/job_state.py). Even so a record is only acted on when it still names the process the launcher started:
pid an int > 1, create time a finite number matching the live process's within a second (pids are recycled), and the
process's command line naming this job root (bubblewrap's `--bind <root> <root>`, or train's `--root <root>`). A
record that fails any of these is not ours: nothing is signalled (operators/launch/local/processes.py), and retention
keeps the job root only while one is ours (operators/state/retention.py).
"""

from __future__ import annotations

import json
import math
import os


CREATE_TIME_SLACK = 1.0

Record = tuple[int, float]


def parse_records(text: str) -> list[Record]:
    """The records of a launch-pids.json; [] when anything in it is malformed (never a partial list)."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    records: list[Record] = []
    if not isinstance(data, list):
        return []
    for entry in data:
        if not (isinstance(entry, list) and len(entry) == 2):
            return []
        pid, ctime = entry
        if type(pid) is not int or pid <= 1 or type(ctime) not in (int, float) or not math.isfinite(ctime) \
                or ctime <= 0:
            return []
        records.append((pid, float(ctime)))
    return records


def read_records(path: str) -> list[Record]:
    try:
        with open(path) as f:
            return parse_records(f.read())
    except OSError:
        return []


def write_records(path: str, records: list[Record]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump([[pid, ctime] for pid, ctime in records], f)
    os.replace(tmp, path)


def ours(pid: int, create_time: float, job_root: str):
    """The live process `pid` if it is the one the launcher started for `job_root`, else None."""
    # lazy: psutil, for a recorded launch only (a data-plane step's garbage collection finds none in the cluster)
    import psutil

    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > CREATE_TIME_SLACK:
            return None  # the pid was recycled
        if os.path.realpath(job_root) not in {os.path.realpath(a) for a in proc.cmdline() if a.startswith("/")}:
            return None  # alive, but not a launch of this job root
        return proc
    except (psutil.Error, OSError):
        return None

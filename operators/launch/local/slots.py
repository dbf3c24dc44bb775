"""What a running local job holds on its worker: a uid of [training] local_uid_range (when the worker is root) and
the GPUs it asked for, each held by one job at a time.

One claim per job, `<workspace>/state/.local-slots/<job_name>.json` ({"uid": U or null, "gpus": [device paths],
"root": job root, "at": time}), beside the jobs' state directories where user code cannot write (a job name never starts with a dot);
claims are read and written under an flock of that directory's `.lock`, so two launches never take the same uid or
GPU. A claim is released when its launcher reports the training (release), and counts as gone once its job has nothing
left running (its worker died): none of the job's recorded launch processes alive, no process running as its uid, and
older than CLAIM_GRACE_SECONDS (the time between a claim and the processes that use it). A task retry of the same job
finds its own claim and keeps it (it may be reattaching to the training that holds those GPUs).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass

from operators.launch.local.processes import ours, read_records
from operators.state.job_state import LAUNCH_PIDS, state_path, state_root

log = logging.getLogger(__name__)

SLOTS_DIR = ".local-slots"
CLAIM_GRACE_SECONDS = 60.0
WAIT_POLL_SECONDS = 2.0
WAIT_REPORT_SECONDS = 30.0


class NotEnoughGpus(RuntimeError):
    """The job asks for more GPUs than this worker has (a spec problem: resources.gpu)."""


@dataclass(frozen=True)
class Slots:
    uid: int | None  # None: the worker is not root, user code runs as the worker's own uid
    gpus: tuple[str, ...] = ()  # device nodes, e.g. /dev/nvidia2


def _slots_dir(workspace: str) -> str:
    path = os.path.join(state_root(workspace), SLOTS_DIR)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            claim = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(claim, dict):
        return None
    uid, gpus, at, root = claim.get("uid"), claim.get("gpus"), claim.get("at"), claim.get("root")
    if (uid is not None and type(uid) is not int) or not isinstance(gpus, list) or not isinstance(root, str) \
            or not all(isinstance(g, str) for g in gpus) or type(at) not in (int, float):
        return None
    return claim


def _uids_in_use() -> set[int]:
    import psutil

    uids = set()
    for proc in psutil.process_iter(["uids"]):
        try:
            uids.add(proc.info["uids"].real)
        except (AttributeError, TypeError):
            continue
    return uids


def _job_running(workspace: str, job_name: str, job_root: str) -> bool:
    records = read_records(state_path(workspace, job_name, LAUNCH_PIDS))
    return any(ours(pid, ctime, job_root) is not None for pid, ctime in records)


def _live_claims(directory: str, workspace: str) -> dict[str, dict]:
    """Every job's claim that still counts; the others are removed."""
    claims, uids_in_use = {}, None
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        job, claim = name[:-len(".json")], _read(path)
        if claim is not None and time.time() - claim["at"] < CLAIM_GRACE_SECONDS:
            claims[job] = claim
            continue
        if claim is not None:
            if uids_in_use is None:
                uids_in_use = _uids_in_use()
            if _job_running(workspace, job, claim["root"]) or (claim["uid"] is not None and claim["uid"] in uids_in_use):
                claims[job] = claim
                continue
        log.info("Released the slots of job %s: nothing of it runs any more", job)
        os.unlink(path)
    return claims


def claim(workspace: str, job_name: str, job_root: str, uid_range: tuple[int, int] | None, gpus: int, devices: list[str],
          poll: float = WAIT_POLL_SECONDS) -> Slots:
    """The job's uid (when uid_range is given) and `gpus` of `devices`, waiting while other jobs hold the GPUs it
    needs; NotEnoughGpus at once when the worker has fewer than that."""
    if gpus > len(devices):
        raise NotEnoughGpus(f"resources.gpu is {gpus} but this worker has {len(devices)} GPU(s) "
                            f"([training] local_gpu_devices); ask for at most {len(devices)} or use another backend")
    directory = _slots_dir(workspace)
    reported = 0.0
    while True:
        with open(os.path.join(directory, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            claims = _live_claims(directory, workspace)
            if job_name in claims:  # a retry of this job: keep what it holds
                mine = claims[job_name]
                return Slots(mine["uid"], tuple(mine["gpus"]))
            held_gpus = {g for c in claims.values() for g in c["gpus"]}
            free = [d for d in devices if d not in held_gpus]
            if len(free) >= gpus:
                uid = _free_uid(uid_range, {c["uid"] for c in claims.values()}) if uid_range else None
                slots = Slots(uid, tuple(free[:gpus]))
                _write(os.path.join(directory, f"{job_name}.json"), slots, job_root)
                return slots
        now = time.monotonic()
        if now - reported >= WAIT_REPORT_SECONDS:
            holders = sorted(job for job, c in claims.items() if c["gpus"])
            log.info("Waiting for %d GPU(s): %d of %d free, the others held by %s", gpus, len(free), len(devices),
                     ", ".join(holders))
            reported = now
        time.sleep(poll)


def _free_uid(uid_range: tuple[int, int], taken: set) -> int:
    in_use = _uids_in_use()
    for uid in range(uid_range[0], uid_range[1] + 1):
        if uid not in taken and uid not in in_use:
            return uid
    raise RuntimeError(f"every uid of [training] local_uid_range {uid_range[0]}-{uid_range[1]} is in use; widen it")


def _write(path: str, slots: Slots, job_root: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"uid": slots.uid, "gpus": list(slots.gpus), "root": job_root, "at": time.time()}, f)
    os.replace(tmp, path)


def release(workspace: str, job_name: str) -> None:
    directory = _slots_dir(workspace)
    with open(os.path.join(directory, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            os.unlink(os.path.join(directory, f"{job_name}.json"))
        except FileNotFoundError:
            pass

"""What a running job holds on its worker: the GPUs it asked for (local and docker backends: the worker's own
devices, [training] local_gpu_devices), each held by one job at a time, and on the local backend with a root worker a
uid of [training] local_uid_range.

One claim per job, `<workspace>/state/.local-slots/<job_name>.json` ({"uid": U or null, "gpus": [device paths],
"holders": [[pid, create time], ...], "at": time}), beside the jobs' state directories where user code cannot write
(a job name never starts with a dot); claims are read and written under an flock of that directory's `.lock`, so two
launches never take the same uid or GPU. A claim is released when its launcher reports the training (release), and counts as gone once its job has nothing
left running (its worker died): none of the processes its launcher recorded as holding it (record_holders: the local
sandboxes, the containers' init processes) alive, no process running as its uid, and older than CLAIM_GRACE_SECONDS
(the time between a claim and the processes that use it). Nothing here knows a backend. A task retry of the same job
finds its own claim and keeps it (it may be reattaching to the training that holds those GPUs).
"""

from __future__ import annotations

import fcntl
import glob
import json
import logging
import os
import time
from dataclasses import dataclass

import psutil

from operators.state.job_state import state_root

log = logging.getLogger(__name__)

SLOTS_DIR = ".local-slots"
GPU_QUEUE = "this worker's GPUs"  # what the console says a job waiting for them is queued in
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
    uid, gpus, at, holders = claim.get("uid"), claim.get("gpus"), claim.get("at"), claim.get("holders")
    if (uid is not None and type(uid) is not int) or not isinstance(gpus, list) or not isinstance(holders, list) \
            or not all(isinstance(g, str) for g in gpus) or type(at) not in (int, float):
        return None
    return claim


def _uids_in_use() -> set[int]:
    uids = set()
    for proc in psutil.process_iter(["uids"]):
        try:
            uids.add(proc.info["uids"].real)
        except (AttributeError, TypeError):
            continue
    return uids


def _holding(holders: list) -> bool:
    """Whether a recorded holder still runs (the same pid, started at the recorded time: pids are recycled)."""
    for holder in holders:
        if not (isinstance(holder, list) and len(holder) == 2 and type(holder[0]) is int
                and type(holder[1]) in (int, float)):
            continue
        try:
            if abs(psutil.Process(holder[0]).create_time() - holder[1]) < 1.0:
                return True
        except psutil.Error:
            continue
    return False


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
            if _holding(claim["holders"]) or (claim["uid"] is not None and claim["uid"] in uids_in_use):
                claims[job] = claim
                continue
        log.info("Released the slots of job %s: nothing of it runs any more", job)
        os.unlink(path)
    return claims


def claim(workspace: str, job_name: str, uid_range: tuple[int, int] | None, gpus: int, devices: list[str],
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
                _write(os.path.join(directory, f"{job_name}.json"), slots, [])
                if gpus:  # the console's queue line (plugins/training_console/queue_line.py): no longer waiting
                    log.info("Given GPU(s) %s of this worker", ", ".join(slots.gpus))
                return slots
        now = time.monotonic()
        if now - reported >= WAIT_REPORT_SECONDS:
            holders = sorted(job for job, c in claims.items() if c["gpus"])
            log.info("Waiting for %d GPU(s): %d of %d free, the others held by %s", gpus, len(free), len(devices),
                     ", ".join(holders))  # the console's queue line too
            reported = now
        time.sleep(poll)


def _free_uid(uid_range: tuple[int, int], taken: set) -> int:
    in_use = _uids_in_use()
    for uid in range(uid_range[0], uid_range[1] + 1):
        if uid not in taken and uid not in in_use:
            return uid
    raise RuntimeError(f"every uid of [training] local_uid_range {uid_range[0]}-{uid_range[1]} is in use; widen it")


def _write(path: str, slots: Slots, holders: list) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"uid": slots.uid, "gpus": list(slots.gpus), "holders": holders, "at": time.time()}, f)
    os.replace(tmp, path)


def record_holders(workspace: str, job_name: str, holders: list[tuple[int, float]]) -> None:
    """The processes (pid, create time) that hold the job's claim from now on: while one runs, it stays the job's."""
    directory = _slots_dir(workspace)
    path = os.path.join(directory, f"{job_name}.json")
    with open(os.path.join(directory, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mine = _read(path)
        if mine is not None:
            _write(path, Slots(mine["uid"], tuple(mine["gpus"])), [[pid, ctime] for pid, ctime in holders])


def gpu_devices(pattern: str) -> list[str]:
    """This worker's GPUs that jobs may have ([training] local_gpu_devices: a glob), in device-number order."""
    return sorted(glob.glob(pattern), key=device_number) if pattern else []


def device_number(path: str) -> int:
    """nvidia2 -> 2: the NVIDIA index Docker's device requests and CUDA_VISIBLE_DEVICES use."""
    digits = os.path.basename(path)[len("nvidia"):]
    return int(digits) if digits.isdigit() else 1 << 30


def release(workspace: str, job_name: str) -> None:
    directory = _slots_dir(workspace)
    with open(os.path.join(directory, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            os.unlink(os.path.join(directory, f"{job_name}.json"))
        except FileNotFoundError:
            pass

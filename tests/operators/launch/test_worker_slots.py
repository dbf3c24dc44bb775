"""The worker's leases of uids and GPUs: one job each, kept by a retry, freed when nothing of the job runs."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import psutil
import pytest

from operators.launch import worker_slots
from operators.launch.worker_slots import NotEnoughGpus, claim, record_holders, release

UIDS = (1_300_000_000, 1_300_000_002)
GPUS = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]  # names only: nothing here opens them


def _age(workspace, job: str, seconds: float) -> None:
    path = os.path.join(workspace, "state", worker_slots.SLOTS_DIR, f"{job}.json")
    with open(path) as f:
        document = json.load(f)
    document["at"] -= seconds
    with open(path, "w") as f:
        json.dump(document, f)


def test_running_jobs_get_distinct_uids_and_gpus_and_a_retry_keeps_its_own(tmp_path):
    a = claim(str(tmp_path), "a", UIDS, 2, GPUS)
    b = claim(str(tmp_path), "b", UIDS, 1, GPUS)
    assert a.uid != b.uid and set(a.gpus).isdisjoint(b.gpus) and len(a.gpus) == 2
    assert claim(str(tmp_path), "a", UIDS, 2, GPUS) == a  # the retry of a reattaches to what a holds
    release(str(tmp_path), "a")
    assert claim(str(tmp_path), "c", UIDS, 2, GPUS).gpus == a.gpus


def test_more_gpus_than_the_worker_has_is_refused_at_once_naming_the_field(tmp_path):
    with pytest.raises(NotEnoughGpus, match=r"resources.gpu is 4 but this worker has 3 GPU"):
        claim(str(tmp_path), "greedy", None, 4, GPUS)


def test_a_job_waits_for_gpus_until_their_holder_is_released(tmp_path):
    claim(str(tmp_path), "holder", None, 3, GPUS)
    got = []
    waiter = threading.Thread(target=lambda: got.append(claim(str(tmp_path), "waiter", None, 1, GPUS, poll=0.05)))
    waiter.start()
    time.sleep(0.5)
    assert not got  # all three are the holder's
    release(str(tmp_path), "holder")
    waiter.join(30)
    assert got and len(got[0].gpus) == 1


def test_a_claim_whose_processes_are_gone_is_released_but_not_one_whose_process_runs(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        claim(str(tmp_path), "alive", None, 1, GPUS)
        record_holders(str(tmp_path), "alive", [(sleeper.pid, psutil.Process(sleeper.pid).create_time())])
        claim(str(tmp_path), "dead", None, 1, GPUS)
        record_holders(str(tmp_path), "dead", [(2**22 + 7, time.time())])  # a pid that is not running
        for job in ("alive", "dead"):
            _age(str(tmp_path), job, worker_slots.CLAIM_GRACE_SECONDS + 1)
        # Both held one GPU each; the dead job's is free again, the live one's is not.
        assert len(claim(str(tmp_path), "next", None, 2, GPUS).gpus) == 2
        assert not os.path.exists(os.path.join(tmp_path, "state", worker_slots.SLOTS_DIR, "dead.json"))
        assert os.path.exists(os.path.join(tmp_path, "state", worker_slots.SLOTS_DIR, "alive.json"))
    finally:
        sleeper.kill()
        sleeper.wait()

"""Which node index N (bridge trnN, subnet 10.213.N.0/24, cgroup /training-node-N, image store containerd-N) a new
node takes on this machine.

An index is taken while its node runs: its containerd holds the lock of the store's metadata DB (bbolt flocks
it), or processes live in its cgroup. A node whose test process was killed leaves its bridge and cgroups behind,
and each store holds its own copy of the training images (~9 GB): taking a fresh index then meant importing them
all again into a new store, which filled this machine's disk. An abandoned index is reclaimed instead, lowest
first, so the stores that already hold the images are the ones reused.

Two nodes starting at once (two test sessions) would see the same index free: `choosing()` is a machine-wide lock
held from the choice until the new node's containerd holds its store.
"""

from __future__ import annotations

import fcntl
import subprocess
from contextlib import contextmanager
from pathlib import Path

from images import image_store

CGROUP = Path("/sys/fs/cgroup")
MAX_INDEX = 250


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=False, text=True, capture_output=True)


def store_locked(index: int) -> bool:
    """True while a containerd has this index's store open."""
    db = image_store(index) / "io.containerd.metadata.v1.bolt" / "meta.db"
    try:
        with open(db, "rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False  # no store yet
    return False


def cgroup_busy(index: int) -> bool:
    for controller in CGROUP.iterdir() if CGROUP.is_dir() else ():
        root = controller / f"training-node-{index}"
        for tasks in root.rglob("tasks") if root.is_dir() else ():
            try:
                if tasks.read_text().strip():
                    return True
            except OSError:
                continue
    return False


def remove_cgroups(name: str) -> None:
    for controller in CGROUP.iterdir() if CGROUP.is_dir() else ():
        path = controller / name
        if not path.is_dir():
            continue
        for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                child.rmdir()
            except OSError:
                pass
        try:
            path.rmdir()
        except OSError:
            pass


def reclaim(index: int, log) -> None:
    """Remove what an abandoned node of this index left: its bridge, its FORWARD rule, its cgroups."""
    bridge = f"trn{index}"
    _run("iptables", "-D", "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT")
    _run("ip", "link", "del", bridge)
    remove_cgroups(f"training-node-{index}")
    log(f"reclaimed index {index} from a node that was not stopped (bridge {bridge}, its cgroups)")


@contextmanager
def choosing():
    """Hold the machine's index lock (a flock, released when this process dies)."""
    lock = image_store(0).parent / "slots.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def free_index(log) -> int:
    """The lowest index no running node holds (reclaiming an abandoned one); call it under `choosing()`."""
    links = _run("ip", "-o", "link", "show").stdout
    for index in range(1, MAX_INDEX):
        leftovers = f" trn{index}:" in links or (CGROUP / "memory" / f"training-node-{index}").exists()
        if not leftovers and not store_locked(index):
            return index
        if leftovers and not store_locked(index) and not cgroup_busy(index):
            reclaim(index, log)
            return index
    raise RuntimeError(f"no free pod subnet 10.213.N.0/24 (nodes trn1..trn{MAX_INDEX - 1} all in use)")

"""The workspace side of a training Job on Kubernetes (file system only, no API calls).

- Ownership: Airflow writes the job root as its own uid; the pods run as `run_as_user` (1000 by default). The
  launcher makes the job root group-writable with set-group-id directories and gives the pods the directory's group
  as fsGroup, so `train` can write output/, model/ and checkpoints whatever the two uids are.
- Mount points: the kubelet creates a missing subPath directory as root, and a channel's read-only mount point
  input/data/<channel> nested in the job root's mount must exist before the pod starts: both are created here.
- The launch record: `kubernetes-job.json` in the job's state directory (operators/state/job_state.py, which no pod
  mounts: a pod cannot forge it) says when this job's Job was created. ttlSecondsAfterFinished
  removes a finished Job; a retry that finds no Job but a success marker written after that creation knows the Job
  succeeded (the runtime writes output/success last) and reports it instead of training again. Where the data plane
  is the cluster's, the Job's init container writes the record and a step reads the marker (main below).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import stat
import sys
import tempfile
import time

from operators.fs.job_root import JobRoot, UnsafePathError
from operators.launch.outcome import clear_outcome_markers
from operators.launch.steps import report_outcome
from operators.state.job_state import KUBERNETES_JOB

# The success marker's time is the file system's (a coarse clock, milliseconds behind time.time(); on a shared file
# system, another machine's clock), the launch time this process's: a marker this much older than the launch still
# counts. An earlier run's marker is older by a whole re-run (CI: a marker written right after the launch record
# read 4 ms older).
CLOCK_SLACK_SECONDS = 2.0


def workspace_group(job_root: str) -> int | None:
    """The group the pods write through: the job root's (what the Airflow worker created it with)."""
    try:
        return os.stat(job_root).st_gid
    except OSError:
        return None


def prepare_job_root(job_root: str, mount_points: list[str]) -> None:
    """Create the mount points and make the job root's tree group-writable (set-group-id directories).

    The tree is the tenant's, and another host's training may already run in it (a pod of the same Job started
    earlier, or an earlier try's still ending): it is walked from directory descriptors (operators/fs/job_root.py),
    every component opened without following a link, so a directory swapped for a link to elsewhere is skipped with
    a warning naming it and no mode change ever lands outside the job root (this may run as root on the worker's
    side). A mount point with a link on its way is refused (UnsafePathError, one line naming it)."""
    os.makedirs(job_root, exist_ok=True)  # the root's own path is the platform's: built from its settings
    root = JobRoot(job_root)
    for path in mount_points:
        root.ensure_dir(root.relative(path))
    with root.directory() as top:
        _add_mode(top, ".", stat.S_ISGID | stat.S_IRWXG, os.fstat(top))
    for entry in root.walk():
        bits = stat.S_ISGID | stat.S_IRWXG if entry.is_dir else stat.S_IRGRP | stat.S_IWGRP
        _add_mode(entry.dir_fd, entry.name, bits, entry.stat)


def _add_mode(dir_fd: int, name: str, bits: int, seen: os.stat_result) -> None:
    """Add `bits` to `name` in the directory `dir_fd`, through a descriptor opened without following a link and only
    if it is still the entry the walk saw (same inode): a name swapped meanwhile is left alone."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:  # a link (ELOOP), gone, or not ours to read: nothing to do
        return
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            return
        if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
            return  # a hard link's inode is also a file elsewhere, maybe outside the root (as JobRoot.give_to keeps it)
        if (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) and (st.st_mode & bits) != bits:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) | bits)
    except OSError:  # not ours (written by a pod of an earlier try): it is group-writable through fsGroup already
        pass
    finally:
        os.close(fd)


def write_launch_record(state: str, job_uid: str | None) -> None:
    """Record in the job's state directory `state` (created) that its Job `job_uid` was created (or, written by the
    Job's init container in the cluster, that one of its pods started) now."""
    os.makedirs(state, mode=0o700, exist_ok=True)
    # A temporary name of its own: every host's init container writes the record as its pod starts, often in the
    # same instant, and a shared name renamed away under another writer failed that pod (and so the Job).
    fd, temp = tempfile.mkstemp(prefix=f".{KUBERNETES_JOB}.", suffix=".tmp", dir=state)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump({"uid": job_uid, "created": time.time()}, handle)
        os.replace(temp, os.path.join(state, KUBERNETES_JOB))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def succeeded_since_launch(job_root: str, state: str) -> bool:
    """The runtime's success marker is newer than the Job the state directory records: that Job succeeded."""
    try:
        with open(os.path.join(state, KUBERNETES_JOB)) as handle:
            created = float(json.load(handle)["created"])
        marker = JobRoot(job_root).stat("output/success")  # the job's: a link (output/ too) is no marker
        return marker is not None and marker.st_mtime >= created - CLOCK_SLACK_SECONDS
    except (OSError, ValueError, KeyError, TypeError):
        return False


# The platform image's entry point for this module in the cluster (operators/launch/kubernetes/data_plane.py).
WORKSPACE_COMMAND = ["python3", "-m", "operators.launch.kubernetes.workspace"]
JOB_UID_ENV = "TRAINING_JOB_UID"  # the init container's Job uid (the downward API), kept in the launch record


def main(argv: list[str]) -> int:
    """What the worker does on a shared volume, done in the cluster when the data plane is the cluster's:
    - `prepare --state STATE JOB_ROOT [MOUNT_POINT...]`: the training Job's init container prepares the job root,
      clears an earlier try's outcome markers and records the launch in the job's state directory STATE;
    - `succeeded --state STATE JOB_ROOT`: a step says (its termination message) whether the Job the record names
      succeeded: what a retry asks when the TTL removed the Job."""
    parser = argparse.ArgumentParser(prog="operators.launch.kubernetes.workspace")
    parser.add_argument("action", choices=("prepare", "succeeded"))
    parser.add_argument("--state", required=True)
    parser.add_argument("job_root")
    parser.add_argument("mount_points", nargs="*")
    args = parser.parse_args(argv)
    # The walk's warnings (an entry it skipped) reach the pod's log.
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s")
    if args.action == "succeeded":
        succeeded = succeeded_since_launch(args.job_root, args.state)
        print(f"job root {args.job_root}: {'a' if succeeded else 'no'} success marker since the last launch",
              flush=True)
        report_outcome({"result": succeeded})
        return 0
    try:
        prepare_job_root(args.job_root, args.mount_points)
    except UnsafePathError as err:  # the job's own doing (an earlier try's files): one line, no traceback
        print(f"job root {args.job_root} not prepared: {err}", file=sys.stderr, flush=True)
        return 1
    clear_outcome_markers(args.job_root)
    write_launch_record(args.state, os.environ.get(JOB_UID_ENV))
    print(f"job root {args.job_root} prepared: group-writable, {len(args.mount_points)} mount point(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

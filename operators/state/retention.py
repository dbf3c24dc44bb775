"""Garbage collection of the workspace: pins of dead jobs, old job roots, old cache entries.

A job pins the cache entries of its channels (cache/<key>/users/u-<job>) from prefetch until its upload stage
releases them. A job that never reaches that stage (the DAG run was marked failed, the worker was killed, the
run was deleted) would pin them forever, so eviction could never free them. Pins are therefore also released
when they are dead:
- the job's root is gone; or
- [training] retention_days > 0 and the pin is older than that, unless a local training of the job is running.

With retention_days > 0, job roots whose last activity (the root, its output/ files, its launch pids) is older
than that and that run nothing are removed with their state directories (operators/state/job_state.py; a state directory
whose job root is gone goes the same way), and unused cache entries not used for that long are discarded.
Every user's SDK code archives not uploaded again for [training] sdk_code_expiry_days are removed from the staging area
(operators/staging/sdk_uploads.py; 0 = never), with partial uploads a killed server left behind; except an archive the
kept lineage record of a run with a model names (kept_archives): that model can be reproduced while
its job's state is kept, i.e. within retention_days.
Everything here is best effort: it runs at the start of every prefetch and never fails a job.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from operators.cache.eviction import CacheEntries
from operators.fs.directories import remove_tree
from operators.job_outputs import LINEAGE
from operators.settings import TrainingSettings, sdk_code_expiry_days
from operators.staging.sdk_uploads import expire_all
from operators.state.job_state import LAUNCH_PIDS, remove_state_dir, state_dir, state_root
from operators.state.launch_records import ours, read_records

log = logging.getLogger(__name__)

DAY = 86400.0


@dataclass
class Collected:
    released_pins: list[str] = field(default_factory=list)  # "<job>@<key prefix>"
    removed_job_roots: list[str] = field(default_factory=list)
    removed_entries: list[str] = field(default_factory=list)
    removed_code: list[str] = field(default_factory=list)  # "<user dir>/<sha256>.tar.gz" of the SDK's staging area


def _running_locally(job_root: str, state: str) -> bool:
    """A local training the launcher recorded (in the job's state directory) still runs this job root."""
    return any(ours(pid, ctime, job_root) for pid, ctime in read_records(os.path.join(state, LAUNCH_PIDS)))


def _last_activity(job_root: str, state: str) -> float:
    newest = 0.0
    paths = [os.path.join(job_root, sub) for sub in ("", "output", os.path.join("output", "success"),
                                                     os.path.join("output", "failure"))]
    for path in [*paths, state, os.path.join(state, LAUNCH_PIDS)]:
        try:
            newest = max(newest, os.stat(path).st_mtime)
        except OSError:
            pass
    return newest


def collect_garbage(jobs_dir: str, cache: CacheEntries, retention_days: float, now: float | None = None,
                    code_expiry_days: float | None = None) -> Collected:
    """code_expiry_days: of the SDK's staged code; None = [training] sdk_code_expiry_days."""
    now = time.time() if now is None else now
    max_age = retention_days * DAY if retention_days > 0 else None
    done = Collected()
    workspace = os.path.dirname(jobs_dir)  # jobs/ and state/ are siblings in the workspace

    def state_of(name: str) -> str:
        return state_dir(workspace, name)

    if max_age is not None and os.path.isdir(state_root(workspace)):
        for name in sorted(os.listdir(state_root(workspace))):  # a job root removed by hand leaves its state
            root = os.path.join(jobs_dir, name)
            if not os.path.lexists(root) and now - _last_activity(root, state_of(name)) > max_age \
                    and not _running_locally(root, state_of(name)):
                remove_state_dir(workspace, name)
    if max_age is not None and os.path.isdir(jobs_dir):
        for name in sorted(os.listdir(jobs_dir)):
            root = os.path.join(jobs_dir, name)
            if name.startswith(".") or not os.path.isdir(root) or os.path.islink(root):
                continue
            if now - _last_activity(root, state_of(name)) > max_age and not _running_locally(root, state_of(name)):
                trash = os.path.join(jobs_dir, f".trash-{name}-{os.urandom(4).hex()}")
                try:
                    os.rename(root, trash)  # gone in one step for anyone listing jobs
                except OSError as err:
                    log.warning("retention: cannot remove job root %s: %s", root, err)
                    continue
                remove_tree(trash)
                remove_state_dir(workspace, name)
                done.removed_job_roots.append(name)
                log.info("retention: removed job root %s (unused for more than %g days)", name, retention_days)
    for info in cache.entries():
        for user in info.users:
            root = os.path.join(jobs_dir, user)
            pin_age = cache.pin_age(info.key, user, now)
            dead = not os.path.isdir(root) or (
                max_age is not None and pin_age is not None and pin_age > max_age
                and not _running_locally(root, state_of(user)))
            if dead and cache.release_pin(info.key, user):
                done.released_pins.append(f"{user}@{info.key[:16]}")
                log.info("retention: released the pin of job %s on cache entry %s (%s): the job is gone or stale",
                         user, info.key[:16], info.uri)
    if max_age is not None:
        done.removed_entries = cache.expire(max_age, now)
    done.removed_code = _expire_staged_code(workspace, code_expiry_days, now)
    return done


def _expire_staged_code(workspace: str, expiry_days: float | None, now: float) -> list[str]:
    code_staging_dir = TrainingSettings(workspace=workspace).code_staging_dir
    if not os.path.isdir(code_staging_dir):
        return []
    if expiry_days is None:
        expiry_days = sdk_code_expiry_days()
    removed = expire_all(code_staging_dir, expiry_days, now, kept=kept_archives(workspace))
    for name in removed:
        log.info("retention: removed the SDK's staged code %s (not uploaded again for %g days, or a dead partial "
                 "upload)", name, expiry_days)
    return removed


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def referenced_archives(workspace: str) -> frozenset[str]:
    """The sha256s of the SDK code archives (code.archive_sha256) that the kept lineage records of runs with a model
    (outcome.model_uri) name: `<workspace>/state/<job>/lineage.json`, one small file per kept job (kept within
    [training] retention_days), read as plain JSON (operators/lineage/record.py writes
    them; it sits above this layer). An unreadable record names nothing."""
    found = set()
    root = state_root(workspace)
    try:
        names = os.listdir(root)
    except OSError:
        return frozenset()
    for name in names:
        try:
            with open(os.path.join(root, name, LINEAGE), encoding="utf-8") as handle:
                record = json.load(handle)
            sha = (record.get("code") or {}).get("archive_sha256")
            if isinstance(sha, str) and _SHA256.match(sha) and (record.get("outcome") or {}).get("model_uri"):
                found.add(sha)
        except (OSError, ValueError, AttributeError):
            continue
    return frozenset(found)


def kept_archives(workspace: str) -> Callable[[], frozenset[str]]:
    """What sdk_uploads.expire/expire_all keep in `workspace`'s staging area (referenced_archives), read on the first
    call only: only once an archive has expired, and once for every user's directory."""
    found: list[frozenset[str]] = []

    def kept() -> frozenset[str]:
        if not found:
            found.append(referenced_archives(workspace))
        return found[0]

    return kept

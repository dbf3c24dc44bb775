"""Keeps checkpoint_path in step with the job's checkpoint directory: periodically while training runs, and at the end.

Only files that changed (size or mtime) since the last pass are uploaded, so a pass over an unchanged directory costs
a directory walk and no requests.

The checkpoint dir is the tenant's: it is walked and read through operators/fs/job_root.py, so only regular files
below it are uploaded and no link is followed (each is skipped with a warning). The storage layer takes paths: each
file is opened first (no link followed, fstat says regular) and its /proc/self/fd path is what is uploaded, so a name
swapped for a link after the check still uploads the file that was checked. No copy is made (checkpoints can be
many GiB).

The one name this upload takes from the tenant is the file's path below the checkpoint dir, so a file or directory of
a name the platform's owner records use (operators/state/owner_records.py) is never uploaded, with a warning: the
records that say whose a location is are the platform's alone.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from operators.fs.job_root import JobRoot, UnsafePathError
from operators.jobspec.ownership import RESERVED_NAMES
from operators.storage.errors import StorageError

log = logging.getLogger(__name__)


class CheckpointSync:
    def __init__(self, storage, checkpoint_dir: str, checkpoint_uri: str, interval_seconds: float = 60.0,
                 job_root: str | None = None):
        self.storage = storage
        self.checkpoint_dir = Path(checkpoint_dir)
        # Links are refused from the job root down (the checkpoint dir itself may not be one either).
        self._root = JobRoot(job_root or self.checkpoint_dir)
        self._rel = self._root.relative(self.checkpoint_dir)
        self.checkpoint_uri = checkpoint_uri.rstrip("/") + "/"
        self.interval = interval_seconds
        self._seen: dict[str, tuple[int, int]] = {}
        self._reserved_warned: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def mark_existing(self) -> None:
        """Files restored from checkpoint_path are already there: don't upload them back."""
        for rel, stat in self._files():
            self._seen[rel] = stat

    def sync_once(self) -> int:
        uploaded = 0
        for rel, stat in self._files():
            if self._seen.get(rel) == stat:
                continue
            try:
                with self._root.pinned_path(f"{self._rel}/{rel}" if self._rel else rel) as (path, st):
                    self.storage.upload_file(path, self.checkpoint_uri + rel)
            except UnsafePathError as err:  # swapped for a link (or a FIFO) since the walk
                log.warning("Checkpoints: skipped %s", err)
                continue
            except FileNotFoundError:
                continue  # removed since the walk (a checkpoint rotated away)
            self._seen[rel] = (st.st_size, st.st_mtime_ns)
            uploaded += 1
        if uploaded:
            log.info("Checkpoints: %d file(s) synced to %s", uploaded, self.checkpoint_uri)
        return uploaded

    def sync_final(self, attempts: int = 3, delay_seconds: float = 5.0) -> int:
        """The last pass, when training has ended: retried a few times on errors that may pass (each request has had
        its own attempts already), because failing here fails the launch stage, whose retry would train again."""
        for attempt in range(1, attempts + 1):
            try:
                return self.sync_once()  # what an attempt uploaded before failing is not uploaded again
            except StorageError as err:
                if err.permanent or attempt == attempts:
                    raise
                log.warning("Checkpoint sync to %s failed (attempt %d of %d, retrying in %.0f s): %s",
                            self.checkpoint_uri, attempt, attempts, delay_seconds, err)
                time.sleep(delay_seconds)
        return 0

    def _files(self):
        found = []
        try:
            for entry in self._root.walk(self._rel):
                if entry.is_dir or (entry.name.startswith(".") and entry.name.endswith(".tmp")):
                    continue  # a directory, or a checkpoint still being written
                if any(part in RESERVED_NAMES for part in entry.rel.split("/")):
                    if entry.rel not in self._reserved_warned:
                        self._reserved_warned.add(entry.rel)
                        log.warning("Checkpoints: skipped %s: %s is the name of the platform's owner records",
                                    entry.rel, next(p for p in entry.rel.split("/") if p in RESERVED_NAMES))
                    continue
                found.append((entry.rel, (entry.stat.st_size, entry.stat.st_mtime_ns)))
        except FileNotFoundError:
            return []
        except UnsafePathError as err:
            log.warning("Checkpoints: not synced: %s", err)
            return []
        return found

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="checkpoint-sync", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync_once()
            except Exception as err:  # a failed periodic sync must not kill training; the final sync reports
                log.warning("Checkpoint sync to %s failed (will retry): %s", self.checkpoint_uri, err)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)

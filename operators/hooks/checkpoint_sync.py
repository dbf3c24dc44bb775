"""Keeps checkpoint_path in step with the job's checkpoint directory: periodically while training runs, and at the end.

Only files that changed (size or mtime) since the last pass are uploaded, so a pass over an unchanged directory costs
a directory walk and no requests.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)


class CheckpointSync:
    def __init__(self, storage, checkpoint_dir: str, checkpoint_uri: str, interval_seconds: float = 60.0):
        self.storage = storage
        self.checkpoint_dir = Path(checkpoint_dir)
        self.checkpoint_uri = checkpoint_uri.rstrip("/") + "/"
        self.interval = interval_seconds
        self._seen: dict[str, tuple[int, int]] = {}
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
            self.storage.upload_file(str(self.checkpoint_dir / rel), self.checkpoint_uri + rel)
            self._seen[rel] = stat
            uploaded += 1
        if uploaded:
            log.info("Checkpoints: %d file(s) synced to %s", uploaded, self.checkpoint_uri)
        return uploaded

    def sync_final(self, attempts: int = 3, delay_seconds: float = 5.0) -> int:
        """The last pass, when training has ended: retried a few times on errors that may pass (each request has had
        its own attempts already), because failing here fails the launch stage, whose retry would train again."""
        from operators.hooks.storage_errors import StorageError

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
        if not self.checkpoint_dir.is_dir():
            return []
        found = []
        for dirpath, _, names in os.walk(self.checkpoint_dir):
            for name in names:
                path = Path(dirpath, name)
                if name.startswith(".") and name.endswith(".tmp"):
                    continue  # a checkpoint still being written
                st = path.stat()
                found.append((path.relative_to(self.checkpoint_dir).as_posix(), (st.st_size, st.st_mtime_ns)))
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

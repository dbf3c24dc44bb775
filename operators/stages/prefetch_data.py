from __future__ import annotations

import os

from operators.cache.views import link_view
from operators.fs.job_root import JobRoot
from operators.launch.registry import launcher_for
from operators.stages.base import JobStageOperator, storage_failures_fail_fast
from operators.stages.in_cluster import runs_in_cluster
from operators.state.retention import collect_garbage
from operators.storage.disk_space import CACHE_TODO, DiskFullError, disk_full_error, is_disk_full


class PrefetchDataOperator(JobStageOperator):
    """Prefetch each input channel into the shared cache (once), then make input/data/<channel> a view of it.

    Locally the view is a link into the cache; backends that mount cache entries (pods, containers) get an empty
    mount point there instead.
    """

    ui_color = "#e3f2e1"

    @runs_in_cluster
    @storage_failures_fail_fast
    def execute(self, context) -> dict:
        try:
            return self._prefetch()
        except DiskFullError:
            raise
        except OSError as err:  # the cache's small files (pins, last-used stamps) or a job's views on a full disk
            if not is_disk_full(err):
                raise
            raise disk_full_error("the data cache's records and the job's channel views", self.settings.workspace,
                                  None, CACHE_TODO) from None

    def _prefetch(self) -> dict:
        # lazy: data cache -> storage client (botocore, obstore), not at DAG parse
        from operators.cache.data_cache import DataCacheHook
        cache = DataCacheHook(self.settings.cache_dir, self.storage, max_bytes=self.settings.cache_max_bytes)
        self._collect_garbage(cache)
        mounts = launcher_for(self.spec.backend).capabilities.mounts_channels
        channels = {}
        if self.spec.inputs:  # a retry's job root may hold links an earlier script left: never put views through one
            tree = JobRoot(self.layout.root)
            tree.ensure_dir(tree.relative(self.layout.data_dir))
        for channel, uri in self.spec.inputs.items():
            entry = cache.prefetch(uri, user=self.spec.job_name)
            view = self.layout.channel_dir(channel)
            if not mounts:
                link_view(entry, view)
            else:  # the backend mounts the entry read-only here: leave an empty mount point
                if os.path.islink(view):
                    os.unlink(view)
                os.makedirs(view, exist_ok=True)
            self.log.info("Channel %s: %s -> %s (%s, %d files, %d bytes, %d bytes transferred)", channel, uri,
                          entry.path, "reused" if entry.reused else "downloaded", entry.files, entry.bytes,
                          entry.bytes_transferred)
            channels[channel] = {"entry": str(entry.path), "is_file": entry.is_file, "uri": uri,
                                 "file_name": entry.file_name}
        return channels

    def _collect_garbage(self, cache) -> None:
        """Release dead jobs' pins, apply [training] retention_days: best effort, never fails the job."""
        try:
            done = collect_garbage(self.settings.jobs_dir, cache, self.settings.retention_days)
        except Exception as err:  # noqa: BLE001 - garbage collection must never fail a training
            self.log.warning("Workspace garbage collection failed (the job goes on): %s", err)
            return
        if done.released_pins or done.removed_job_roots or done.removed_entries:
            self.log.info("Workspace garbage collection: released %d dead pins, removed %d job roots and %d cache "
                          "entries", len(done.released_pins), len(done.removed_job_roots), len(done.removed_entries))

from __future__ import annotations

from operators.stages.base import JobStageOperator


class PrefetchDataOperator(JobStageOperator):
    """Prefetch each input channel into the shared cache (once), then make input/data/<channel> a view of it."""

    ui_color = "#e3f2e1"

    def execute(self, context) -> dict:
        from operators.hooks.data_cache import DataCacheHook

        cache = DataCacheHook(self.settings.cache_dir, self.storage, max_bytes=self.settings.cache_max_bytes)
        channels = {}
        for channel, uri in self.spec.inputs.items():
            entry = cache.prefetch(uri, user=self.spec.job_name)
            cache.link_view(entry, self.layout.channel_dir(channel))
            self.log.info("Channel %s: %s -> %s (%s, %d files, %d bytes, %d bytes transferred)", channel, uri,
                          entry.path, "reused" if entry.reused else "downloaded", entry.files, entry.bytes,
                          entry.bytes_transferred)
            channels[channel] = {"entry": str(entry.path), "is_file": entry.is_file, "uri": uri,
                                 "file_name": entry.file_name}
        return channels

"""A real, small file system for disk-full tests: a tmpfs mounted with size= (the kernel answers ENOSPC exactly as a full
disk does, and statvfs reports its real free space), plus a ballast file that fills it to a chosen level and is removed
again to "free space". Mounting needs root (the suite runs as root here and in CI); elsewhere the tests skip, saying so.

    from small_disk import small_disk  # noqa: F401  (the fixture)

    def test_x(small_disk):
        disk = small_disk(16 * MiB)        # a mounted directory of 16 MiB
        disk.fill(leave=3 * MiB)           # ballast: 3 MiB stay free
        disk.fill_when(lambda: ..., leave=0)   # from another thread, as soon as the condition holds
        disk.free()                        # remove the ballast
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import pytest


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.ballast = path / ".ballast"
        self.filled = threading.Event()
        self._watchers: list[threading.Thread] = []
        self._stop = threading.Event()

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Grow the ballast until only `leave` bytes are free (another job's files, as far as the code can tell)."""
        with open(self.ballast, "ab") as fh:
            extra = self.free_bytes() - leave
            while extra >= 4096:  # others may be writing meanwhile: whatever fits, until `leave` is left
                try:
                    os.posix_fallocate(fh.fileno(), os.fstat(fh.fileno()).st_size, extra)
                except OSError:
                    extra //= 2
                    continue
                extra = self.free_bytes() - leave
        self.filled.set()

    def fill_when(self, condition: Callable[[], bool], leave: int = 0, timeout: float = 60) -> None:
        """From a thread: fill the disk the moment `condition()` holds (polled every millisecond)."""

        def watch() -> None:
            deadline = time.monotonic() + timeout
            while not self._stop.is_set() and time.monotonic() < deadline:
                if condition():
                    self.fill(leave)
                    return
                time.sleep(0.001)

        thread = threading.Thread(target=watch, name="disk-filler", daemon=True)
        thread.start()
        self._watchers.append(thread)

    def free(self) -> None:
        self._stop.set()
        for thread in self._watchers:
            thread.join(5)
        self._watchers.clear()
        self._stop.clear()
        self.ballast.unlink(missing_ok=True)
        self.filled.clear()


def mount_tmpfs(size: int) -> Path:
    if os.geteuid() != 0:
        pytest.skip("disk-full tests mount a size-limited tmpfs, which needs root (the suite runs as root in CI)")
    path = Path(tempfile.mkdtemp(prefix="small-disk-"))
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs here (no CAP_SYS_ADMIN?): {result.stderr.strip()}")
    return path


@pytest.fixture
def small_disk():
    """small_disk(size) -> SmallDisk: a tmpfs of `size` bytes, unmounted after the test."""
    disks: list[SmallDisk] = []

    def make(size: int) -> SmallDisk:
        disk = SmallDisk(mount_tmpfs(size))
        disks.append(disk)
        return disk

    yield make
    for disk in disks:
        disk.free()
        subprocess.run(["umount", "-l", str(disk.path)], check=False)
        try:
            disk.path.rmdir()
        except OSError:
            pass

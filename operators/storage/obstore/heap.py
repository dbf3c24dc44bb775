"""Keep the C heap's freed transfer buffers in the process instead of handing them back to the kernel at every free.

Why: a transfer through obstore allocates a fresh buffer for every chunk of every body (object_store's frames on its
Rust threads, then one Python bytes object of ~1 MiB per chunk, obstore's gather). glibc's malloc, left to its
defaults, serves those from its heap but gives the heap's free top back to the kernel once it exceeds twice the
largest chunk freed so far (its dynamic trim threshold, ~2.8 MiB here): with 16 ranges in flight that happens all the
time, and the next chunks fault their pages in again, zeroed. Measured on one 2 GiB object from MinIO (16 ranges,
bench/README.md, "Local transfers at full sizes"): ~150,000 minor page faults and 3.4-3.7 s of client CPU, against
~43,000 faults and 2.9-3.3 s with the thresholds below (s5cmd: 2.5-2.9 s).

The thresholds are the process's (mallopt has no per-call form); set once, the first time an obstore store is made.
M_MMAP_THRESHOLD is fixed at 32 MiB, the value glibc's dynamic threshold grows to on its own (setting either
threshold switches the dynamic adjustment off, so both are set: the trim threshold alone would leave every buffer
above 128 KiB to a fresh mmap, measured at ~850,000 faults). M_TRIM_THRESHOLD 64 MiB: at most that much free memory
stays at the top of a heap, and only memory the process used at its peak. Where the C library is not glibc (musl has
mallopt as a no-op) nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import threading

log = logging.getLogger("operators.storage.hook")

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024

_lock = threading.Lock()
_outcome: list[bool] = []  # set once: whether the thresholds are set


def keep_freed_buffers() -> bool:
    """Set glibc's mmap and trim thresholds for this process (once); True when they are set."""
    with _lock:
        if not _outcome:
            _outcome.append(_set_thresholds())
        return _outcome[0]


def _set_thresholds() -> bool:
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):
            return False  # not glibc: its malloc has other policies (or none to tune)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if not ok:
        log.debug("mallopt refused the transfer buffers' thresholds; the C heap keeps its defaults")
    return ok


__all__ = ["keep_freed_buffers"]

"""How long ``train`` may live: its own max_run_seconds deadline and its launcher's lifetime.

A launcher that runs ``train`` as a child process (the local backend) can die at any moment (kill -9 of the
Airflow worker). Without these, the training would keep running with no time limit (the launcher enforced it)
and nobody to collect it. So ``train`` enforces ``--max-run-seconds`` itself, and with ``--die-with-parent`` it
asks Linux for a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``): SIGTERM, which stops the user code
through the usual path. The user code in turn gets SIGKILL when ``train`` dies, in case ``train`` itself was
SIGKILLed. In containers (Docker, Kubernetes) ``train`` is the container's main process and neither is needed.

A launcher that wants to reattach after its own death (the local backend: a task retry picks up the training the
killed attempt started) uses a lease instead of the parent-death signal: ``--lease FILE --lease-seconds N``. The
launcher touches FILE every few seconds; ``train`` stops the training (SIGTERM to itself, the usual path) once FILE
is older than N seconds, so a worker that died for good still leaves nothing running after N seconds, while a retry
within N seconds renews the lease and finds the training where it was.
"""

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
import time

from training_runtime.errors import InvalidJobError

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
MAX_RUN_ENV = "TRAINING_MAX_RUN_SECONDS"
DIE_WITH_PARENT_ENV = "TRAINING_DIE_WITH_PARENT"

_libc = None


def _prctl_pdeathsig(signum):
    """PR_SET_PDEATHSIG for the calling thread's process; False where Linux's prctl is not there."""
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0


def max_run_seconds(value, environ):
    """``--max-run-seconds`` else $TRAINING_MAX_RUN_SECONDS; None (no limit) when neither is set or it is 0."""
    raw = value if value is not None else environ.get(MAX_RUN_ENV, "")
    if raw in (None, ""):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1
    if seconds < 0:
        raise InvalidJobError("max run seconds must be a number >= 0, got %r" % (raw,))
    return seconds or None


def watch_lease(path, seconds, check_every=None):
    """A daemon thread: SIGTERM to us once ``path`` was not touched for ``seconds`` (a missing file counts from now).

    Returns the thread (None when there is no lease)."""

    if not path or not seconds:
        return None
    seconds = float(seconds)
    every = check_every or max(0.5, min(5.0, seconds / 10))
    started = time.time()

    def renewed_at():
        try:
            return os.stat(path).st_mtime
        except OSError:
            return started

    def watch():
        while True:
            time.sleep(every)
            age = time.time() - max(renewed_at(), started)
            if age > seconds:
                log.error("the launcher stopped renewing its lease %s %.0f s ago (limit %g s): it died and no "
                          "retry took the training over; stopping it", path, age, seconds)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, name="lease-watch", daemon=True)
    thread.start()
    return thread


def wants_die_with_parent(flag, environ):
    return bool(flag) or environ.get(DIE_WITH_PARENT_ENV, "").lower() in ("1", "true", "yes")


def die_with_parent():
    """SIGTERM to us when our parent dies; if it died before we asked, stop now."""
    parent = os.getppid()
    if not _prctl_pdeathsig(signal.SIGTERM):
        log.warning("cannot ask for a signal when the launcher dies (no prctl here): the training would outlive it")
        return
    if os.getppid() != parent:  # the parent died between our start and the prctl: the signal will never come
        os.kill(os.getpid(), signal.SIGTERM)


def kill_child_with_us():
    """A ``preexec_fn``: the user code gets SIGKILL when ``train`` dies (even by SIGKILL, which it cannot forward).

    It runs in the forked child before exec (PR_SET_PDEATHSIG survives exec); if ``train`` is already gone by
    then, the child exits at once.
    """
    train_pid = os.getpid()

    def preexec():
        _prctl_pdeathsig(signal.SIGKILL)
        if os.getppid() != train_pid:
            os._exit(137)

    return preexec

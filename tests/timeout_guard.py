"""Per-test time limits that fail the test, not the test process.

pytest-timeout's "thread" method ends a timed-out test by printing every stack and calling os._exit(1). Under xdist
that was ruinous: the worker's session fixtures (Airflow deployments, control planes, the real node) were never
stopped and kept two cores busy, and xdist's scope scheduler sent the crashed test to a fresh worker, which started
them all again and timed out again, nine times; CI ran past its 90 minutes.

Here a test that runs past its limit gets `TestTimedOut` raised in its main thread, again every RAISE_EVERY seconds
until its teardown starts (a polling loop's `except Exception` may swallow one; it is an Exception so that pytest
records a fixture that failed to start): it fails with the stacks and the line it was waiting on, its fixtures are
torn down as usual, and the session goes on. Only if the main thread is stuck in a call that never
returns to Python (GRACE seconds more) is the process ended, after killing every process it started and running the
`on_hard_exit` callbacks (for what is not a child process: the real node's containers).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from typing import Callable

import psutil
import pytest

GRACE = float(os.environ.get("TEST_TIMEOUT_GRACE", "60"))
RAISE_EVERY = 2.0
_hard_exit_callbacks: list[Callable[[], None]] = []
_ending = threading.Event()  # set when this process is about to be ended


class TestTimedOut(Exception):
    """The test ran past its time limit (pytest-timeout's `timeout` setting or mark)."""

    __test__ = False  # not a test class, despite its name


def on_hard_exit(callback: Callable[[], None]) -> Callable[[], None]:
    """Run `callback` if this process must be ended; returns a function that unregisters it."""
    _hard_exit_callbacks.append(callback)
    return lambda: _hard_exit_callbacks.remove(callback) if callback in _hard_exit_callbacks else None


def kill_descendants() -> list[str]:
    """SIGKILL every process this one started, and theirs (new sessions included: they are still descendants)."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    names = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:  # a stopped server its fixture never waited for
                names.append(f"{child.pid} {child.name()}")
        except psutil.Error:
            pass
        try:
            child.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=10)
    return names


def _stacks() -> str:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    current = threading.get_ident()
    return "".join(f"--- stack of {names.get(ident, ident)} ---\n" + "".join(traceback.format_stack(frame))
                   for ident, frame in sys._current_frames().items() if ident != current)


def _raise_in(thread_id: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


class Timer:
    def __init__(self, item, timeout: float):
        self.item, self.timeout = item, timeout
        self.done = threading.Event()
        self.tearing_down = False
        self.main = threading.main_thread().ident
        self.thread = threading.Thread(target=self._watch, name=f"timeout-guard {item.nodeid}", daemon=True)
        self.thread.start()

    def cancel(self) -> None:
        self.done.set()
        self.thread.join()

    def _watch(self) -> None:
        if self.done.wait(self.timeout):
            return
        message = f"{self.item.nodeid} ran past its time limit of {self.timeout:g}s"
        sys.stderr.write(f"\n+++ Timeout: {message}\n{_stacks()}")
        sys.stderr.flush()
        timed_out = type("TestTimedOut", (TestTimedOut,), {"__str__": lambda self: message})
        deadline = time.monotonic() + GRACE
        # Raised again until the test's teardown starts: a polling loop's `except Exception` may swallow one. The
        # teardown (the fixtures' clean-up) is left to run.
        while not self.tearing_down and time.monotonic() < deadline:
            _raise_in(self.main, timed_out)
            if self.done.wait(RAISE_EVERY):
                return
        if self.done.wait(max(0.0, deadline - time.monotonic())):
            return
        capture = self.item.config.pluginmanager.getplugin("capturemanager")
        if capture:  # what follows must reach the terminal: this process's captured output dies with it
            capture.suspend_global_capture(in_=True)
        sys.stderr.write(f"\n+++ Timeout: {self.item.nodeid} did not stop {GRACE:g}s after it was interrupted; "
                         f"ending this test process, and every process it started\n{_stacks()}")
        sys.stderr.flush()
        for callback in list(_hard_exit_callbacks):
            try:
                callback()
            except Exception as error:  # noqa: BLE001 - the process ends anyway; say what could not be stopped
                sys.stderr.write(f"+++ cleanup {callback!r} failed: {error}\n")
        _ending.set()
        kill_descendants()
        os._exit(1)


def pytest_timeout_set_timer(item, settings):
    if settings.method != "thread":
        return None  # pytest-timeout's own "signal" method
    item._timeout_guard = Timer(item, settings.timeout)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
    timer = getattr(item, "_timeout_guard", None)
    if timer is not None:
        timer.tearing_down = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Killing the call the main thread was stuck in (a child's waitpid) wakes it, with the TestTimedOut still
    pending: it must not report the test as merely timed out before this process ends, so it waits here for the end.
    The test is then reported as crashed, with the stacks printed above."""
    if _ending.is_set():
        threading.Event().wait()


def pytest_timeout_cancel_timer(item):
    timer = getattr(item, "_timeout_guard", None)
    if timer is None:
        return None
    timer.cancel()
    del item._timeout_guard
    return True


def pytest_unconfigure(config):
    """A test worker that ends (normally, or on an internal error) leaves no process of its own behind."""
    if hasattr(config, "workerinput"):
        left = kill_descendants()
        if left:
            sys.stderr.write(f"timeout guard: killed what this worker's tests left running: {', '.join(left)}\n")

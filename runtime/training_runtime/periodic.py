"""Work done every few seconds beside the user code (the system sampler, the metrics echo): a daemon thread between
start() and stop(). Nothing periodic may fail a training: a pass that raises is skipped (logged at debug level)."""

import logging
import threading

log = logging.getLogger(__name__)


class Periodic:
    """Calls ``tick()`` every ``seconds`` once started, after ``first()``; ``stop()`` ends the thread (waiting for a
    pass under way) and, with ``last_tick``, runs one more pass so what happened at the very end is not lost."""

    thread_name = "periodic"
    last_tick = False

    def __init__(self, seconds):
        self.seconds = seconds
        self._done = threading.Event()
        self._thread = None

    def first(self):
        """Before the first wait, in the thread (a baseline)."""

    def tick(self):
        raise NotImplementedError

    def _guarded(self, step):
        try:
            step()
        except Exception as error:  # noqa: BLE001 - see the module's doc
            log.debug("%s: pass skipped: %s", self.thread_name, error)

    def _loop(self):
        self._guarded(self.first)
        while not self._done.wait(self.seconds):
            self._guarded(self.tick)

    def start(self):
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._done.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.last_tick:
            self._guarded(self.tick)

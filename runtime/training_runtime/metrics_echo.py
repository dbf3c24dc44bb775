"""The metrics stream copied into the output, for a platform that cannot read the job root.

Where the kubernetes backend keeps a job's bytes in the cluster (its data plane), Airflow's side never sees the job
root, so points a script (and the system sampler) append to ``output/metrics.jsonl`` would never reach the job page,
MLflow or early stopping. With ``TRAINING_METRICS_ECHO=1`` (the platform sets it then), ``train`` follows that file
while the user code runs and writes each complete line to its stdout as

    [training-metric] {"name": "loss", "value": 0.25, "step": 3}

which the platform reads from the pod's log like every other line (operators/tracking/metrics.py checks each point;
the line is not shown in the task log). A line is written whole, never inside one of the user code's
(process.OUTPUT_LOCK). Only the first host echoes (trainer.py): there, every host's job root is the same directory on
the cluster's volume, so the file holds every host's points (each system sample names its host). Nothing here may
fail a training.
"""

import os
import sys

from training_runtime.contract import METRIC_LINE_PREFIX, METRICS_ECHO_ENV, METRICS_STREAM
from training_runtime.periodic import Periodic
from training_runtime.process import MAX_LINE_BYTES, OUTPUT_LOCK

POLL_SECONDS = 1.0
READ_BYTES = 1024 * 1024


class Echo(Periodic):
    """Follows ``path`` from its start (a retry's earlier points too, as the platform reads the whole file where it
    can) and writes its new complete lines to ``output`` (a binary stream). Its last pass, at stop(), sends the
    points written as the user code ended before ``train`` reports its outcome."""

    thread_name = "metrics-echo"
    last_tick = True

    def __init__(self, path, output, seconds=POLL_SECONDS):
        super().__init__(seconds)
        self.path, self.output = path, output
        self._offset = 0
        self._partial = b""

    def tick(self):
        self.copy_new_lines()

    def copy_new_lines(self):
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return  # not written yet (or not a file we read)
        try:
            size = os.fstat(fd).st_size
            if size < self._offset:  # truncated or replaced: start again
                self._offset, self._partial = 0, b""
            while self._offset < size:
                chunk = os.pread(fd, min(READ_BYTES, size - self._offset), self._offset)
                if not chunk:
                    break
                self._offset += len(chunk)
                self._write(chunk)
        finally:
            os.close(fd)

    def _write(self, chunk):
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:  # no point is that long: drop it rather than hold it
            self._partial = b""
        text = b"".join(METRIC_LINE_PREFIX.encode() + line.rstrip(b"\r") + b"\n"
                        for line in lines if line.strip() and len(line) <= MAX_LINE_BYTES)
        if text:
            with OUTPUT_LOCK:
                self.output.write(text)
                self.output.flush()


def start(root, environ, output=None):
    """The echo of this run (started), or None unless the platform asked for it."""
    if environ.get(METRICS_ECHO_ENV) != "1":
        return None
    return Echo(os.path.join(root, METRICS_STREAM), output if output is not None else sys.stdout.buffer).start()

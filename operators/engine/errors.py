"""How an engine function says a stage did not do its work: StageSkipped (nothing to do: an earlier stage failed),
StageFailed (no retry can fix it); anything else it raises is for the task's retries. The adapters map these two to
Airflow's skip and fail (operators/stages/base.py), the data-plane step to its outcome (operators/engine/step.py)."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from operators.storage.errors import StorageError


class StageSkipped(Exception):
    """The stage has nothing to do (the reason says why); the task ends skipped."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class StageFailed(Exception):
    """The stage failed in a way no retry can fix (the reason says what to do); the task fails at once."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@contextlib.contextmanager
def failing_fast() -> Iterator[None]:
    """The one place where storage errors no retry can fix (access denied, no such bucket or object, a connection
    without an endpoint: StorageError.permanent) and refused archives become StageFailed; everything else (interrupted
    connections, throttling, a transfer cut short) goes on as it is, for the task's retries
    (operators/pipelines/template.py)."""
    try:
        yield
    except StorageError as err:
        if err.permanent:
            raise StageFailed(str(err)) from None
        raise
    except Exception as err:
        # An archive refused by operators/fs/safe_tar.py, looked up where it was raised: a process that never imported
        # safe_tar (a data-plane step's cache hit: isal, tarfile) raised none, and need not import it to say so.
        safe_tar = sys.modules.get("operators.fs.safe_tar")
        if safe_tar is not None and isinstance(err, safe_tar.BadArchiveError):
            raise StageFailed(str(err)) from None
        raise

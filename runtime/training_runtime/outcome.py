"""``output/success`` and ``output/failure``.

Rules (hosts of a local job share one root, so every step tolerates the others):

* At start, a success/failure file older than this ``train`` process is left
  over from an earlier attempt and removed, but only on a single-host root: on a
  root shared by several hosts a peer may already have failed before this host
  started, and the launcher that started them cleared the markers beforehand.
* On failure, an existing non-empty ``output/failure`` is kept: the user code
  wrote its own reason (or another host failed first). Otherwise the reason is
  written. ``output/success`` is removed: a failure on any host fails the job.
* On success, ``output/success`` is written unless a failure file exists.

Every file is written to a private name and renamed, so readers (the upload
stage) never see half a file. The failure text is capped at
:data:`MAX_FAILURE_BYTES`.
"""

import json
import logging
import os

from training_runtime.files import write_atomically

log = logging.getLogger(__name__)

MAX_FAILURE_BYTES = 16 * 1024
# Kubernetes keeps what a container writes here as its termination message (at most 4 KiB): the reason reaches the
# launcher through the API where the launcher cannot read the job root (the cluster data plane).
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_BYTES = 4096
MAX_LINE_CHARS = 1000


def clear_stale(layout, started_at):
    if _host_count(layout) > 1:
        return
    for path in (layout.success_file, layout.failure_file):
        try:
            if os.stat(path).st_mtime < started_at:
                os.remove(path)
                log.info("removed %s left over from an earlier attempt", path)
        except FileNotFoundError:
            pass


#: What the original runtimes write into output/success (ti-containers "success",
#: sagemaker-training an empty file).
SUCCESS_TEXT = {"sagemaker": ""}


def write_success(layout, layout_name=None):
    if _has_content(layout.failure_file):
        log.warning("%s exists (written by the user code or another host): not writing %s",
                    layout.failure_file, layout.success_file)
        return
    _write(layout.success_file, SUCCESS_TEXT.get(layout_name, "success"))


#: How a host's failure starts when its elastic group broke up because another host failed (trainer.py): on a busy
#: machine it can land in the shared job root before the failing host writes the cause, which then replaces it.
GROUP_BROKE_UP = "the elastic group could not go on"


def write_failure(layout, text):
    _remove(layout.success_file)
    if _has_content(layout.failure_file) and not (_starts_with(layout.failure_file, GROUP_BROKE_UP)
                                                  and not text.startswith(GROUP_BROKE_UP)):
        log.info("keeping %s as the user code (or another host) wrote it", layout.failure_file)
        return
    capped = _cap(text)
    _write(layout.failure_file, capped)
    _tell_kubernetes(capped)


def _starts_with(path, prefix):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(len(prefix)) == prefix
    except OSError:
        return False


def _tell_kubernetes(text):
    if not os.path.isfile(TERMINATION_LOG):
        return  # not a Kubernetes container
    data = text.encode("utf-8", "replace")
    if len(data) > TERMINATION_BYTES:  # the start says why
        data = data[: TERMINATION_BYTES - 16].decode("utf-8", "ignore").encode() + b"\n[... truncated]"
    try:
        with open(TERMINATION_LOG, "wb") as handle:
            handle.write(data)
    except OSError as err:
        log.debug("could not write the termination message: %s", err)


def _cap(text):
    lines = [
        line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " [...]"
        for line in text.splitlines()
    ]
    capped = "\n".join(lines) + "\n"
    data = capped.encode("utf-8", "replace")
    if len(data) > MAX_FAILURE_BYTES:
        # Keep the start (the reason) and the end (the last error lines).
        head = data[: MAX_FAILURE_BYTES // 4].decode("utf-8", "ignore")
        tail = data[-(MAX_FAILURE_BYTES * 3 // 4):].decode("utf-8", "ignore")
        capped = head + "\n[... truncated ...]\n" + tail
    return capped


def _host_count(layout):
    try:
        with open(layout.config_file("resourceconfig.json"), encoding="utf-8") as handle:
            return len(json.load(handle).get("hosts") or ())
    except (OSError, ValueError, AttributeError, TypeError):
        return 1


def _has_content(path):
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, text)

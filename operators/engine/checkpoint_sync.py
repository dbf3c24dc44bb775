"""Checkpoint sync in the cluster, from a pod of its own: `python -m operators.engine.checkpoint_sync`, the one-pod
Job the Kubernetes backend starts before a training Job with a checkpoint_path when the cluster keeps the data plane
(operators/launch/kubernetes/data_plane.py). It does on the cluster's volume what the Airflow worker does on a shared
one (operators/staging/checkpoints.py): a pass every `interval` seconds while the training runs, and the last one when
the launcher ends it after the training ended (SIGTERM: the deletion of its Job; its grace period covers the pass).

Why a pod of its own: it holds the platform's storage identity (the storage Secret's connections, or the token of
`data_plane_service_account`), and a pod shares its network namespace, its volumes and (EKS, GKE) its service
account's identity among all its containers: beside the tenant's training it would have handed them to the tenant.
It mounts the job root only, read-only (it reads checkpoints, never writes), and walks it without following a link.
Its log reaches the launch task's log (the launcher streams it when it ends the sync), so it masks the connections'
secrets like a step's (operators/log_masking.py); like a step it imports no Airflow (operators/step_process.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading

from operators.launch.steps import CHECKPOINT_SYNC_DONE, CHECKPOINT_SYNC_ENV, CHECKPOINT_SYNC_READY_FILE
from operators.settings import training_settings
from operators.engine.step import exit_now, masked_log_output
from operators.staging.checkpoints import CheckpointSync
from operators.storage.errors import StorageError
from operators.storage.hook import ObjectStorageHook

log = logging.getLogger(__name__)


def main() -> int:
    masked_log_output()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    config = json.loads(os.environ[CHECKPOINT_SYNC_ENV])
    interval, uri = float(config["interval"]), config["uri"]
    storage = ObjectStorageHook(connections=config.get("connections") or {}, settings=training_settings())
    sync = CheckpointSync(storage, config["dir"], uri, interval, job_root=config["job_root"])
    if config.get("mark_existing", True):
        sync.mark_existing()  # restored from checkpoint_path by the restore step: not uploaded back
    with open(CHECKPOINT_SYNC_READY_FILE, "w"):
        pass
    log.info("checkpoint sync: %s -> %s every %s s", config["dir"], uri, config["interval"])
    while not stopping.wait(interval):
        try:
            sync.sync_once()
        except (StorageError, OSError) as err:  # the next pass tries again; the last one must succeed
            log.warning("Checkpoint sync to %s failed (next pass in %s s): %s", uri, config["interval"], err)
    try:
        sync.sync_final()
    except (StorageError, OSError) as err:
        log.error("checkpoint sync: the last pass to %s failed: %s", uri, err)
        return 1
    log.info(CHECKPOINT_SYNC_DONE)
    return 0


if __name__ == "__main__":
    exit_now(main())

"""Checkpoint sync beside the training, in the cluster: `python -m operators.staging.checkpoint_sidecar`, the native
sidecar (an init container with restartPolicy Always) that the Kubernetes backend adds to a training Job when the
cluster keeps the data plane (operators/launch/kubernetes/data_plane.py). It does on the cluster's volume what the
Airflow worker does on a shared one (operators/staging/checkpoints.py): a pass every `interval` seconds while the
training runs, the last one when the kubelet stops it after the training container ended (SIGTERM).

Host 0's sidecar syncs (the hosts share one checkpoint directory); the others only wait for the end. Platform code in
the platform image, with the storage Secret's connections, which the training container never gets.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading

from operators.settings import training_settings
from operators.staging.checkpoints import CheckpointSync
from operators.storage.errors import StorageError

CHECKPOINT_SYNC_ENV = "TRAINING_CHECKPOINT_SYNC"  # {"dir", "uri", "job_root", "interval", "connections"}
# Written once the restored checkpoints are known: the sidecar's startup probe, which holds the training container
# back until then (else the training's first checkpoint could be taken for a restored one and never uploaded).
READY_FILE = "/tmp/checkpoint-sync-ready"


def _ready() -> None:
    with open(READY_FILE, "w"):
        pass


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s",
                        force=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    config = json.loads(os.environ[CHECKPOINT_SYNC_ENV])
    if os.environ.get("JOB_COMPLETION_INDEX", "0") != "0":
        _ready()
        stopping.wait()  # restartPolicy Always would start an exited sidecar again: wait for the end instead
        return 0
    # lazy: storage client: only host 0's sidecar syncs, the others wait without it
    from operators.storage.hook import ObjectStorageHook

    storage = ObjectStorageHook(connections=config.get("connections") or {}, settings=training_settings())
    sync = CheckpointSync(storage, config["dir"], config["uri"], float(config["interval"]), job_root=config["job_root"])
    sync.mark_existing()  # restored from checkpoint_path by the restore step: not uploaded back
    _ready()
    print(f"checkpoint sync: {config['dir']} -> {config['uri']} every {config['interval']} s", flush=True)
    while not stopping.wait(float(config["interval"])):
        try:
            sync.sync_once()
        except (StorageError, OSError) as err:  # the next pass tries again; the last one must succeed
            logging.getLogger(__name__).warning("Checkpoint sync to %s failed (next pass in %s s): %s",
                                                config["uri"], config["interval"], err)
    sync.sync_final()
    print("checkpoint sync: the last pass is done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

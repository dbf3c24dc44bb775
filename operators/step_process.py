"""Whether this process is one of the platform's data-plane steps in the cluster (a stage's step pod, the checkpoint
sync's pod), and so reads its settings and its storage connections from its own environment without Airflow.

The worker builds such a pod's whole configuration into its environment (operators/launch/kubernetes/data_plane.py):
the [training] settings as AIRFLOW__TRAINING__<KEY> (operators/settings.py training_settings_env), the connections as
AIRFLOW_CONN_<ID> (the admin's storage Secret); the pod has no airflow.cfg, metadata database or API server to ask.
There operators/settings.py and operators/storage/remote.py read the environment directly (Airflow's own readers cost
~2 s of imports), the same way Airflow would read it (operators/storage/env_connections.py says where not).

Why the variables, not "Airflow is not imported": a process that has no step variable (a worker's task, the API server,
the SDK's local mode, a test) keeps Airflow's readers, its airflow.cfg and its secrets backends, whatever it happens to
have imported so far; the answer never depends on import order.
"""

from __future__ import annotations

import os

STEP_ENV = "TRAINING_STEP"  # the step's JSON payload (operators/stages/in_cluster.py reads it)
# The checkpoint sync's pod (operators/engine/checkpoint_sync.py), which runs for the training's lifetime beside it:
# its configuration {"dir", "uri", "job_root", "interval", "connections", "mark_existing"}.
CHECKPOINT_SYNC_ENV = "TRAINING_CHECKPOINT_SYNC"


def is_step_process() -> bool:
    """This process is a data-plane step or the checkpoint sync: its settings and connections are in its environment."""
    return STEP_ENV in os.environ or CHECKPOINT_SYNC_ENV in os.environ


__all__ = ["CHECKPOINT_SYNC_ENV", "STEP_ENV", "is_step_process"]

"""airflow.cfg [training.kubernetes] (overridable by AIRFLOW__TRAINING_KUBERNETES__<KEY> variables): the Kubernetes
backend's settings, read with the shared typed getters of operators/settings.py."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from operators.settings import get_bool, get_choice, get_int, get_json, get_list, get_str

DATA_PLANES = ("shared_volume", "cluster")
# A deployment that says nothing moves its jobs' bytes in the cluster: it needs no volume on the Airflow workers, which
# most deployments (managed Airflow, a GPU cluster elsewhere) cannot mount; one whose workers can says shared_volume.
DEFAULT_DATA_PLANE = "cluster"


@dataclass(frozen=True)
class KubernetesSettings:
    conn_id: str = "kubernetes_default"
    namespace: str = "default"
    workspace_pvc: str = "training-workspace"
    service_account: str = ""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    priority_class: str = ""
    node_selector: dict = field(default_factory=dict)
    tolerations: list = field(default_factory=list)
    keep_finished_jobs: bool = False
    ttl_seconds_after_finished: int = 600
    run_as_user: int = 1000
    deferrable: bool = True
    # name -> {namespace, service_account, workspace_pvc, workspace_subpath, run_as_user, security_context,
    # container_security_context}: what a spec's kubernetes.profile may pick (operators/launch/kubernetes/profiles.py)
    profiles: dict = field(default_factory=dict)
    # Kueue (operators/launch/kubernetes/queues.py): the LocalQueue every Job goes to ("" = Kueue not used), the others a
    # spec's kubernetes.queue may pick, and likewise the WorkloadPriorityClass.
    queue: str = ""
    queues: tuple[str, ...] = ()
    queue_priority: str = ""
    queue_priorities: tuple[str, ...] = ()
    # Where a job's bytes move (operators/launch/kubernetes/data_plane.py): "shared_volume" = on the Airflow worker,
    # which mounts the workspace volume; "cluster" = in platform pods beside the training, the worker holds nothing.
    data_plane: str = DEFAULT_DATA_PLANE
    data_plane_image: str = "training-airflow:latest"  # the platform's image the in-cluster steps run
    storage_secret: str = ""  # Secret of AIRFLOW_CONN_<ID> keys: the connections the in-cluster steps use
    data_plane_queue: str = ""  # the Kueue LocalQueue of the steps, where Kueue manages every Job of the namespace
    data_plane_service_account: str = ""  # their service account (workload identity: IRSA, GKE Workload Identity)
    data_plane_uid: int = 50000  # their uid (the Airflow image's user); never the training's
    workspace_group: int = 1000  # the group both write the cluster's workspace through (the training image's)
    # Where the platform pods mount the workspace volume: the paths of a job whose bytes move in the cluster, the same
    # whatever [training] workspace each Airflow worker has (its own, or none).
    data_plane_workspace: str = "/workspace"


def kubernetes_settings() -> KubernetesSettings:
    s = "training.kubernetes"
    return KubernetesSettings(
        conn_id=get_str(s, "conn_id", "kubernetes_default"),
        namespace=get_str(s, "namespace", "default"),
        workspace_pvc=get_str(s, "workspace_pvc", "training-workspace"),
        service_account=get_str(s, "service_account", ""),
        image_pull_policy=get_str(s, "image_pull_policy", "IfNotPresent"),
        image_pull_secrets=get_list(s, "image_pull_secrets"),
        priority_class=get_str(s, "priority_class", ""),
        node_selector=get_json(s, "node_selector", {}),
        tolerations=get_json(s, "tolerations", []),
        keep_finished_jobs=get_bool(s, "keep_finished_jobs", False),
        ttl_seconds_after_finished=get_int(s, "ttl_seconds_after_finished", 600),
        run_as_user=get_int(s, "run_as_user", 1000),
        deferrable=get_bool(s, "deferrable", True),
        profiles=get_json(s, "profiles", {}),
        queue=get_str(s, "queue", "").strip(),
        queues=get_list(s, "queues"),
        queue_priority=get_str(s, "queue_priority", "").strip(),
        queue_priorities=get_list(s, "queue_priorities"),
        data_plane=get_choice(s, "data_plane", DEFAULT_DATA_PLANE, DATA_PLANES),
        data_plane_image=get_str(s, "data_plane_image", KubernetesSettings.data_plane_image).strip(),
        storage_secret=get_str(s, "storage_secret", "").strip(),
        data_plane_service_account=get_str(s, "data_plane_service_account", "").strip(),
        data_plane_queue=get_str(s, "data_plane_queue", "").strip(),
        data_plane_uid=get_int(s, "data_plane_uid", 50000, minimum=1),
        workspace_group=get_int(s, "workspace_group", 1000, minimum=1),
        data_plane_workspace=os.path.normpath(get_str(s, "data_plane_workspace", "/workspace").strip() or "/workspace"),
    )

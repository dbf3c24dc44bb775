"""The [training] sections of airflow.cfg (overridable by AIRFLOW__TRAINING__<KEY> variables)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any


def _conf():
    from airflow.configuration import conf

    return conf


def _get(section: str, key: str, fallback: str) -> str:
    value = _conf().get(section, key, fallback=fallback)
    return fallback if value is None else str(value)


def _get_json(section: str, key: str, fallback: Any) -> Any:
    raw = _get(section, key, "")
    if not raw.strip():
        return fallback
    try:
        return json.loads(raw)
    except ValueError as err:
        raise ValueError(f"airflow.cfg [{section}] {key} is not valid JSON ({err}); fix the setting") from None


@dataclass(frozen=True)
class TrainingSettings:
    workspace: str
    default_backend: str = "local"
    default_layout: str = "ti"
    cache_max_bytes: int = 0
    transfer_concurrency: int = 16
    multipart_threshold: int = 8 * 1024 * 1024
    multipart_chunksize: int = 8 * 1024 * 1024
    checkpoint_sync_seconds: int = 60
    default_image: str = "training-base:latest"

    @property
    def jobs_dir(self) -> str:
        return os.path.join(self.workspace, "jobs")

    @property
    def cache_dir(self) -> str:
        return os.path.join(self.workspace, "cache")

    def job_root(self, job_name: str) -> str:
        return os.path.join(self.jobs_dir, job_name)


@dataclass(frozen=True)
class KubernetesSettings:
    conn_id: str = "kubernetes_default"
    namespace: str = "default"
    workspace_pvc: str = "training-workspace"
    workspace_storage_class: str = ""
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


def training_settings() -> TrainingSettings:
    s = "training"
    home = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
    return TrainingSettings(
        workspace=os.path.abspath(_get(s, "workspace", os.path.join(home, "workspace"))),
        default_backend=_get(s, "default_backend", "local"),
        default_layout=_get(s, "default_layout", "ti"),
        cache_max_bytes=int(_get(s, "cache_max_bytes", "0") or 0),
        transfer_concurrency=int(_get(s, "transfer_concurrency", "16")),
        multipart_threshold=int(_get(s, "multipart_threshold", str(8 * 1024 * 1024))),
        multipart_chunksize=int(_get(s, "multipart_chunksize", str(8 * 1024 * 1024))),
        checkpoint_sync_seconds=int(_get(s, "checkpoint_sync_seconds", "60")),
        default_image=_get(s, "default_image", "training-base:latest"),
    )


def kubernetes_settings() -> KubernetesSettings:
    s = "training.kubernetes"
    secrets = tuple(x.strip() for x in _get(s, "image_pull_secrets", "").split(",") if x.strip())
    return KubernetesSettings(
        conn_id=_get(s, "conn_id", "kubernetes_default"),
        namespace=_get(s, "namespace", "default"),
        workspace_pvc=_get(s, "workspace_pvc", "training-workspace"),
        workspace_storage_class=_get(s, "workspace_storage_class", ""),
        service_account=_get(s, "service_account", ""),
        image_pull_policy=_get(s, "image_pull_policy", "IfNotPresent"),
        image_pull_secrets=secrets,
        priority_class=_get(s, "priority_class", ""),
        node_selector=_get_json(s, "node_selector", {}),
        tolerations=_get_json(s, "tolerations", []),
        keep_finished_jobs=_get(s, "keep_finished_jobs", "False").strip().lower() in ("1", "true", "yes"),
        ttl_seconds_after_finished=int(_get(s, "ttl_seconds_after_finished", "600")),
        run_as_user=int(_get(s, "run_as_user", "1000")),
        deferrable=_get(s, "deferrable", "True").strip().lower() in ("1", "true", "yes"),
    )

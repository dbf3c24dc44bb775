"""What the kubernetes backend can do (operators/launch/declaration.py), without its launcher (which imports the
cncf-kubernetes provider): it defers, mounts cache entries as read-only sub-paths, may queue in Kueue, and runs the
data plane in the cluster when the job's profile says data_plane = cluster (then its files are where the platform's
pods mount the volume). Its hosts are the headless Service's DNS names, known from the job name alone."""

from __future__ import annotations

from typing import Any, Mapping

from operators.launch.base import DEFAULT_MASTER_PORT, Capabilities
from operators.launch.declaration import BackendDeclaration
from operators.launch.kubernetes.names import host_names
from operators.launch.names import resource_name


def cluster_workspace(options: Mapping[str, Any] | None, settings: Any = None) -> str | None:
    """Where the job's files are when its profile keeps its bytes in the cluster (data_plane = cluster): where the
    platform pods mount the volume, whatever this worker's [training] workspace; None: this worker's."""
    # lazy: the options model (pydantic) and [training.kubernetes], only for a kubernetes job
    from operators.launch.kubernetes.options import resolve_options
    from operators.launch.kubernetes.settings import kubernetes_settings

    resolved = resolve_options(options, settings if settings is not None else kubernetes_settings())
    return resolved.data_plane_workspace if resolved.in_cluster else None


class KubernetesHostPlan:
    """Every pod has its own network namespace and a DNS name from the headless Service."""

    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        return host_names(resource_name(job_name), instance_count)

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str] | None:
        return None

    def master_port(self) -> int:
        return DEFAULT_MASTER_PORT


DECLARATION = BackendDeclaration(
    capabilities=Capabilities(deferrable=True, mounts_channels=True),
    queues=True,  # Kueue ([training.kubernetes] queue)
    steps=True,
    cluster_workspace=cluster_workspace,
    host_plan=KubernetesHostPlan(),
)

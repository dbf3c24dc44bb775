"""What a backend declares it can do, readable without importing its launcher (the launchers import Airflow's
providers and their clients; a data-plane step's pod and a stage deciding where its work runs must not): one
`declaration.py` per backend holds its DECLARATION, operators/launch/registry.py `declaration_for` loads it. The stages
and the engine read these fields, never probe a launcher with getattr/hasattr."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from operators.launch.base import Capabilities


class HostPlan(Protocol):
    """The hosts of a job as its backend names them: what input/config/resourceconfig.json and trainingjobconfig.json
    say (operators/launch/job_configs.py). Every Launcher is one; a backend may declare a lighter one."""

    def hosts(self, job_name: str, instance_count: int) -> list[str]: ...

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str] | None: ...

    def master_port(self) -> int: ...


def _on_the_worker(options: Mapping[str, Any] | None) -> None:
    return None


@dataclass(frozen=True)
class BackendDeclaration:
    """`capabilities`: the launcher's (it takes them from here). `queues`: the launcher implements queue_of (the job may
    wait in a queue the console shows). `steps`: the backend can run the data-plane stages as steps in its cluster
    (the launcher implements cluster_step). `cluster_workspace(options)`: where the job's files are when the backend
    keeps them in its cluster (a job's backend options decide), None: on the worker's [training] workspace.
    `host_plan`: the hosts without the launcher, None where only the launcher knows them (a free port)."""

    capabilities: Capabilities
    queues: bool = False
    steps: bool = False
    cluster_workspace: Callable[[Mapping[str, Any] | None], str | None] = _on_the_worker
    host_plan: HostPlan | None = None

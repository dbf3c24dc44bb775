"""What the local backend can do (operators/launch/declaration.py): its job root is the worker's, its channels are
links into the cache, the kernel caps each file (RLIMIT_FSIZE), a GPU job may wait for this worker's GPUs. Its hosts
are process trees on this machine, all at 127.0.0.1."""

from __future__ import annotations

import socket

from operators.launch.base import Capabilities
from operators.launch.declaration import BackendDeclaration


class LocalHostPlan:
    def hosts(self, job_name: str, instance_count: int) -> list[str]:
        return [f"algo-{i + 1}" for i in range(instance_count)]

    def host_addresses(self, job_name: str, instance_count: int) -> dict[str, str]:
        return {host: "127.0.0.1" for host in self.hosts(job_name, instance_count)}

    def master_port(self) -> int:
        """A free port, so concurrent local jobs don't collide on 29500."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]


DECLARATION = BackendDeclaration(
    capabilities=Capabilities(deferrable=False, mounts_channels=False, caps_file_size=True),
    queues=True,  # the worker's GPU slots (operators/launch/worker_slots.py)
    host_plan=LocalHostPlan(),
)

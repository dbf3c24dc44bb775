"""The distributed launcher environment (trainingjobconfig ``distribution``).

Each host runs its own ``train`` (a pod of an Indexed Job, or one local process
per host sharing one job root); the runtime never starts processes on other
hosts. Host ``i`` is ``hosts.index(current_host)``; a host's address is
``host_addresses[host]`` when given (local mode: all ``127.0.0.1``), else its name.

pytorch (any number of hosts)
    MASTER_ADDR (address of hosts[0]; ``127.0.0.1`` for a single host without
    host_addresses), MASTER_PORT (``master_port``, default 29500),
    WORLD_SIZE = hosts x processes_per_host, NODE_RANK = i, RANK = i x
    processes_per_host, LOCAL_RANK = 0, LOCAL_WORLD_SIZE, and the same values as
    torchrun's own variables PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
    PET_MASTER_ADDR, PET_MASTER_PORT (so a bare ``torchrun train.py`` in a
    command joins the job). With processes_per_host > 1 an entry point runs as
    ``python -m torch.distributed.run --nnodes N --node_rank i --nproc_per_node P
    --master_addr A --master_port PORT <script> <args>`` and torchrun sets
    RANK/LOCAL_RANK/WORLD_SIZE per process; a command is not wrapped.
tensorflow (more than one host)
    All hosts are workers unless ``parameter_servers`` is n > 0: then hosts[:n]
    are parameter servers and the rest workers. Host k listens on
    ``address:(master_port + k)`` (distinct ports, so local mode works on one
    machine). TF_CONFIG = ``{"cluster": {"worker": [...], "ps": [...]},
    "task": {"type": "worker"|"ps", "index": j}}`` ("ps" only when n > 0) and
    the ModelArts form VC_TASK_INDEX = j, TF_PS_HOSTS / TF_WORKER_HOSTS
    (comma-separated ``address:port``; TF_PS_HOSTS empty without parameter
    servers), MA_TASK_NAME = ``ps`` | ``worker``. In the modelarts layout an entry
    point also gets ``--task_index j --ps_hosts .. --worker_hosts .. --job_name ..``.
mpi (any number of hosts)
    A hostfile ``input/config/hostfile`` with ``<address> slots=<P>`` lines,
    MPI_HOSTFILE (its path), MPI_HOSTS and HOROVOD_HOSTS (``addr:P,addr:P``;
    hosts sharing an address are merged), MPI_NUM_PROCESSES (hosts x P). The
    entry point or command runs on every host; to use mpirun/horovodrun, start it
    from the command on host 0 (TRAINING_HOST_INDEX=0) with these values.
"""

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Optional

from training_runtime.files import write_atomically

HOSTFILE = "hostfile"


@dataclass
class Plan:
    env: dict[str, str] = field(default_factory=dict)
    #: ``-m torch.distributed.run ...`` arguments to put between python and the script.
    torchrun_args: Optional[list[str]] = None
    #: ModelArts TensorFlow arguments for entry points in the modelarts layout.
    modelarts_args: list[str] = field(default_factory=list)
    #: Files to write before the user code runs: path -> content (the MPI hostfile).
    files: dict[str, str] = field(default_factory=dict)

    def write_files(self):
        """Write :attr:`files`; a path may change (read-only config dir), and
        ``env`` is updated to match."""
        for path, content in self.files.items():
            written = _write_shared_file(path, content)
            for name, value in self.env.items():
                if value == path:
                    self.env[name] = written


def plan(job, layout):
    if job.distribution == "pytorch":
        return _pytorch(job)
    if job.distribution == "tensorflow" and len(job.hosts) > 1:
        return _tensorflow(job)
    if job.distribution == "mpi":
        return _mpi(job, layout)
    return Plan()


def _pytorch(job):
    nodes, rank, per_host = len(job.hosts), job.host_index, job.processes_per_host
    master = job.host_addresses.get(job.hosts[0]) or ("127.0.0.1" if nodes == 1 else job.hosts[0])
    port = str(job.master_port)
    env = {
        "MASTER_ADDR": master,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(nodes * per_host),
        "NODE_RANK": str(rank),
        "RANK": str(rank * per_host),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": str(per_host),
        "PET_NNODES": str(nodes),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": str(per_host),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": port,
    }
    torchrun_args = None
    if per_host > 1:
        torchrun_args = [
            "-m", "torch.distributed.run",
            "--nnodes", str(nodes),
            "--node_rank", str(rank),
            "--nproc_per_node", str(per_host),
            "--master_addr", master,
            "--master_port", port,
        ]
    return Plan(env=env, torchrun_args=torchrun_args)


def _tensorflow(job):
    n_ps = job.parameter_servers
    endpoints = [
        "%s:%d" % (job.address_of(host), job.master_port + k) for k, host in enumerate(job.hosts)
    ]
    ps, workers = endpoints[:n_ps], endpoints[n_ps:]
    k = job.host_index
    task_type, index = ("ps", k) if k < n_ps else ("worker", k - n_ps)
    cluster = {"worker": workers}
    if ps:
        cluster["ps"] = ps
    ps_hosts, worker_hosts = ",".join(ps), ",".join(workers)
    env = {
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}),
        "VC_TASK_INDEX": str(index),
        "TF_PS_HOSTS": ps_hosts,
        "TF_WORKER_HOSTS": worker_hosts,
        "MA_TASK_NAME": task_type,
    }
    modelarts_args = [
        "--task_index", str(index),
        "--ps_hosts", ps_hosts,
        "--worker_hosts", worker_hosts,
        "--job_name", task_type,
    ]
    return Plan(env=env, modelarts_args=modelarts_args)


def _mpi(job, layout):
    slots = {}
    for host in job.hosts:  # dicts keep insertion order: host order is kept
        address = job.address_of(host)
        slots[address] = slots.get(address, 0) + job.processes_per_host
    hostfile = layout.config_file(HOSTFILE)
    host_list = ",".join("%s:%d" % item for item in slots.items())
    env = {
        "MPI_HOSTFILE": hostfile,
        "MPI_HOSTS": host_list,
        "HOROVOD_HOSTS": host_list,
        "MPI_NUM_PROCESSES": str(len(job.hosts) * job.processes_per_host),
    }
    content = "".join("%s slots=%d\n" % item for item in slots.items())
    return Plan(env=env, files={hostfile: content})


def _write_shared_file(path, content):
    """Every host writes the same content (local hosts share one root): write a
    private file and rename it over the final name, so no reader sees half a file.
    A read-only config dir (e.g. a mounted ConfigMap) falls back to a temp dir."""
    try:
        write_atomically(path, content)
    except OSError:
        path = os.path.join(tempfile.mkdtemp(prefix="training-runtime-"), os.path.basename(path))
        write_atomically(path, content)
    return path

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
pytorch with ``elastic`` (trainingjobconfig ``{"min_hosts", "max_hosts", "max_restarts"}``)
    Every host runs its entry point under torch's elastic launcher, whatever
    processes_per_host is: ``python -m torch.distributed.run --nnodes MIN:MAX
    --nproc-per-node P --max-restarts R --rdzv-backend c10d --rdzv-endpoint
    <address of hosts[0]>:PORT --rdzv-id <job name> --rdzv-conf is_host=1|0
    --local-addr <this host's address> --monitor-interval 1 <worker shim> <script>
    <args>``. The rendezvous store lives in host 0's torchrun (``is_host``: host 0
    only, never guessed from names, so local hosts sharing 127.0.0.1 work too); the
    hosts agree on ranks in each round, so RANK/WORLD_SIZE/MASTER_ADDR come from
    torchrun per process and are not set here. A host that is lost makes the others'
    processes fail; torchrun restarts them (at most R times) and re-forms the group
    with whoever is there (at least MIN hosts; a replacement host, or one started
    again, joins the next round), and the script resumes from its checkpoint.
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: with the shared store (torch's
    default), a host joining in a later round waits for ever for a MASTER_ADDR that
    rank 0 publishes only in its first round (torch 2.13, measured). ``LOGLEVEL=INFO``
    (unless set) shows torchrun's own lines about failures and rounds. The worker shim
    (:mod:`training_runtime.elastic_worker`, run by path) tells the script's own
    errors (no restart: the job fails at once) from a lost peer (restart) and logs
    each (re)start with the newest checkpoint. A command is not wrapped; it gets the
    same settings as PET_* variables, so a bare ``torchrun train.py`` joins the group.
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


ELASTIC_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_worker.py")
#: Where the shim keeps this host's elastic state (a private directory ``train`` makes; not the job root).
ELASTIC_STATE_ENV = "TRAINING_ELASTIC_STATE"
#: The job's checkpoint directory, for the shim's "resumes from" line.
ELASTIC_CHECKPOINTS_ENV = "TRAINING_ELASTIC_CHECKPOINTS"


@dataclass
class Plan:
    env: dict[str, str] = field(default_factory=dict)
    #: Variables set only when the job's environment does not set them already.
    env_defaults: dict[str, str] = field(default_factory=dict)
    #: Elastic training: the entry point runs under torchrun through the worker shim.
    elastic: bool = False
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
    if job.distribution == "pytorch" and job.elastic is not None:
        return _pytorch_elastic(job)
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


def _pytorch_elastic(job):
    elastic = job.elastic
    index, per_host = job.host_index, job.processes_per_host
    endpoint = "%s:%d" % (job.address_of(job.hosts[0]), job.master_port)
    settings = {
        "NNODES": "%d:%d" % (elastic.min_hosts, elastic.max_hosts),
        "NPROC_PER_NODE": str(per_host),
        "MAX_RESTARTS": str(elastic.max_restarts),
        "RDZV_BACKEND": "c10d",
        "RDZV_ENDPOINT": endpoint,
        "RDZV_ID": job.job_name,
        "RDZV_CONF": "is_host=%d" % (1 if index == 0 else 0),
        "LOCAL_ADDR": job.address_of(job.current_host),
        "MONITOR_INTERVAL": "1",
    }
    torchrun_args = ["-m", "torch.distributed.run"]
    for name, value in settings.items():
        torchrun_args += ["--" + name.lower().replace("_", "-"), value]
    env = {"PET_" + name: value for name, value in settings.items()}
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return Plan(env=env, env_defaults={"LOGLEVEL": "INFO"}, torchrun_args=torchrun_args, elastic=True)


def describe_elastic(job):
    """One line for the log: what the elastic group is."""
    elastic = job.elastic
    return "elastic: torchrun with %d to %d hosts (%d process(es) each), rendezvous c10d at %s:%d on %s, at most %d " \
        "restart(s)" % (elastic.min_hosts, elastic.max_hosts, job.processes_per_host, job.address_of(job.hosts[0]),
                        job.master_port, job.hosts[0], elastic.max_restarts)


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

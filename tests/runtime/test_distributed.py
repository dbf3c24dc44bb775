"""The launcher environment each host's script actually sees (local mode: one
`train` per host sharing one root, every host at 127.0.0.1)."""

import json
import socket
from pathlib import Path

import pytest

LOCAL = "127.0.0.1"


def _hosts(n):
    return ["algo-%d" % (i + 1) for i in range(n)]


def _free_port():
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


def _run_every_host(job, hosts):
    """Each host's `train` (one after another: the recording script needs no peers)."""
    seen = {}
    for host in hosts:
        result = job.run("--current-host", host)
        assert result.returncode == 0, result.stderr
        seen[host] = job.seen(host)
    return seen


def _run_hosts_together(job, hosts, timeout=120):
    procs = {host: job.start("--current-host", host) for host in hosts}
    outputs = {host: proc.communicate(timeout=timeout) for host, proc in procs.items()}
    for host, proc in procs.items():
        assert proc.returncode == 0, (host, outputs[host][1])
    return outputs


# --------------------------------------------------------------------------- pytorch


@pytest.mark.parametrize("n", [2, 3])
def test_pytorch_environment(make_job, n):
    hosts = _hosts(n)
    job = make_job(hosts=hosts, distribution="pytorch", master_port=29611,
                   host_addresses={h: LOCAL for h in hosts})
    seen = _run_every_host(job, hosts)
    for rank, host in enumerate(hosts):
        env = seen[host]["env"]
        assert env["MASTER_ADDR"] == LOCAL
        assert env["MASTER_PORT"] == "29611"
        assert env["WORLD_SIZE"] == str(n)
        assert env["RANK"] == str(rank)
        assert env["NODE_RANK"] == str(rank)
        assert env["LOCAL_RANK"] == "0"
        assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"]) == (str(n), str(rank), "1")
        assert seen[host]["argv"] == []  # no launcher in front of a single process per host


def test_pytorch_master_is_the_first_host_by_name_without_addresses(make_job):
    hosts = _hosts(2)
    job = make_job(hosts=hosts, distribution="pytorch")
    seen = _run_every_host(job, hosts)
    assert {seen[h]["env"]["MASTER_ADDR"] for h in hosts} == {"algo-1"}
    assert seen["algo-2"]["env"]["MASTER_PORT"] == "29500"  # the default


def test_pytorch_single_host_still_has_a_world(make_job):
    job = make_job(distribution="pytorch")
    assert job.run().returncode == 0
    env = job.seen()["env"]
    assert (env["WORLD_SIZE"], env["RANK"], env["NODE_RANK"], env["LOCAL_RANK"]) == ("1", "0", "0", "0")
    assert env["MASTER_ADDR"] == LOCAL


ALL_REDUCE = """\
import json, os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")  # env:// from MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
value = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(value)
out = os.path.join(os.environ["TRAINING_ROOT"], "output", "data", "rank-%d.json" % dist.get_rank())
with open(out, "w") as f:
    json.dump({"sum": value.item(), "world": dist.get_world_size()}, f)
dist.destroy_process_group()
"""


def test_pytorch_hosts_really_form_a_process_group(make_job):
    hosts = _hosts(2)
    job = make_job(hosts=hosts, distribution="pytorch", master_port=_free_port(),
                   host_addresses={h: LOCAL for h in hosts}, code={"train.py": ALL_REDUCE})
    _run_hosts_together(job, hosts)
    for rank in range(2):
        result = json.loads(Path(job.layout.output_data_dir, "rank-%d.json" % rank).read_text())
        assert result == {"sum": 3.0, "world": 2}


RECORD_PER_RANK = """\
import json, os, sys
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "MASTER_ADDR")
out = os.path.join(os.environ["TRAINING_ROOT"], "output", "data", "rank-%s.json" % os.environ["RANK"])
with open(out, "w") as f:
    json.dump({"env": {k: os.environ.get(k) for k in keys}, "argv": sys.argv[1:]}, f)
"""


def test_pytorch_processes_per_host_run_under_torchrun(make_job):
    job = make_job(distribution="pytorch", processes_per_host=2, master_port=_free_port(),
                   code={"train.py": RECORD_PER_RANK}, hyperparameters={"epochs": 2})
    result = job.run(timeout=120)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        record = json.loads(Path(job.layout.output_data_dir, "rank-%d.json" % rank).read_text())
        assert record["env"]["WORLD_SIZE"] == "2"
        assert record["env"]["LOCAL_RANK"] == str(rank)
        assert record["env"]["GROUP_RANK"] == "0"
        assert record["argv"] == ["--epochs", "2"]


def test_torchrun_arguments_for_a_later_host(make_job):
    hosts = _hosts(2)
    job = make_job(hosts=hosts, distribution="pytorch", processes_per_host=4, master_port=29700,
                   host_addresses={"algo-1": "10.0.0.1", "algo-2": "10.0.0.2"}, hyperparameters={"epochs": 2})
    result = job.run("--check", "--current-host", "algo-2")
    assert result.returncode == 0, result.stderr
    expected = (
        " -m torch.distributed.run --nnodes 2 --node_rank 1 --nproc_per_node 4 --master_addr 10.0.0.1"
        " --master_port 29700 %s/train.py --epochs 2" % job.layout.code_dir
    )
    assert expected in result.stderr


# --------------------------------------------------------------------------- tensorflow


@pytest.mark.parametrize("n", [2, 3])
def test_tensorflow_all_hosts_are_workers(make_job, n):
    hosts = _hosts(n)
    job = make_job(hosts=hosts, distribution="tensorflow", master_port=30000,
                   host_addresses={h: LOCAL for h in hosts}, hyperparameters={"epochs": 1})
    seen = _run_every_host(job, hosts)
    workers = ["127.0.0.1:%d" % (30000 + k) for k in range(n)]
    for index, host in enumerate(hosts):
        env = seen[host]["env"]
        assert json.loads(env["TF_CONFIG"]) == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        assert env["TF_WORKER_HOSTS"] == ",".join(workers)
        assert env["TF_PS_HOSTS"] == ""
        assert env["VC_TASK_INDEX"] == str(index)
        assert env["MA_TASK_NAME"] == "worker"
        # Not the modelarts layout: no extra arguments.
        assert seen[host]["argv"] == ["--epochs", "1"]


@pytest.mark.parametrize("n", [2, 3])
def test_tensorflow_modelarts_form_with_parameter_server(make_job, n):
    hosts = _hosts(n)
    job = make_job(layout="modelarts", hosts=hosts, distribution="tensorflow", parameter_servers=1,
                   master_port=30100, channels=["data"], hyperparameters={"epochs": 1})
    seen = _run_every_host(job, hosts)
    ps = "algo-1:30100"
    workers = ["algo-%d:%d" % (k + 1, 30100 + k) for k in range(1, n)]
    root = str(job.root)
    for k, host in enumerate(hosts):
        env = seen[host]["env"]
        task_type, index = ("ps", 0) if k == 0 else ("worker", k - 1)
        assert json.loads(env["TF_CONFIG"]) == {
            "cluster": {"worker": workers, "ps": [ps]},
            "task": {"type": task_type, "index": index},
        }
        assert (env["VC_TASK_INDEX"], env["MA_TASK_NAME"]) == (str(index), task_type)
        assert env["TF_PS_HOSTS"] == ps
        assert env["TF_WORKER_HOSTS"] == ",".join(workers)
        assert seen[host]["argv"] == [
            "--data_url=%s/input/data/data/" % root,
            "--train_url=%s/output/model/" % root,
            "--task_index", str(index),
            "--ps_hosts", ps,
            "--worker_hosts", ",".join(workers),
            "--job_name", task_type,
            "--epochs", "1",
        ]


def test_tensorflow_single_host_has_no_cluster(make_job):
    job = make_job(distribution="tensorflow")
    assert job.run().returncode == 0
    assert "TF_CONFIG" not in job.seen()["env"]


# --------------------------------------------------------------------------- mpi


@pytest.mark.parametrize("n", [2, 3])
def test_mpi_host_list_with_slots(make_job, n):
    hosts = _hosts(n)
    job = make_job(hosts=hosts, distribution="mpi", processes_per_host=2)
    seen = _run_every_host(job, hosts)
    expected = ",".join("%s:2" % h for h in hosts)
    hostfile = job.root / "input/config/hostfile"
    assert hostfile.read_text() == "".join("%s slots=2\n" % h for h in hosts)
    for host in hosts:
        env = seen[host]["env"]
        assert env["MPI_HOSTS"] == env["HOROVOD_HOSTS"] == expected
        assert env["MPI_HOSTFILE"] == str(hostfile)
        assert env["MPI_NUM_PROCESSES"] == str(2 * n)
        assert seen[host]["argv"] == []  # the entry point runs on every host, no mpirun in front


def test_mpi_local_hosts_sharing_an_address_are_merged(make_job):
    hosts = _hosts(3)
    job = make_job(hosts=hosts, distribution="mpi", host_addresses={h: LOCAL for h in hosts})
    seen = _run_every_host(job, hosts)
    assert seen["algo-3"]["env"]["MPI_HOSTS"] == "127.0.0.1:3"
    assert (job.root / "input/config/hostfile").read_text() == "127.0.0.1 slots=3\n"

"""Elastic training (trainingjobconfig "elastic"): the torchrun command line each host runs, the settings a command
gets, the refusals, the worker shim's verdicts, and real torchrun groups of local hosts (every host at 127.0.0.1):
a script's own error fails at once without a restart, a host stopped mid-training and started again rejoins the
group, which resumes from the checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training_runtime import elastic_worker
from training_runtime.distributed import ELASTIC_SHIM

LOCAL = "127.0.0.1"
HOSTS = ["algo-1", "algo-2", "algo-3"]


def _free_port():
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


def _elastic_job(make_job, hosts=HOSTS, elastic=None, **config):
    config.setdefault("master_port", 29733)
    config.setdefault("host_addresses", {"algo-1": "10.0.0.1", "algo-2": "10.0.0.2", "algo-3": "10.0.0.3"})
    return make_job(hosts=hosts, distribution="pytorch", job_name="elastic-job",
                    elastic={"min_hosts": 2, "max_hosts": 3, "max_restarts": 3} if elastic is None else elastic,
                    **config)


def test_every_host_runs_torchrun_with_the_rendezvous_on_host_0(make_job):
    job = _elastic_job(make_job, hyperparameters={"epochs": 2})
    for host, is_host, address in (("algo-1", 1, "10.0.0.1"), ("algo-2", 0, "10.0.0.2")):
        result = job.run("--check", "--current-host", host)
        assert result.returncode == 0, result.stderr
        expected = (
            " -m torch.distributed.run --nnodes 2:3 --nproc-per-node 1 --max-restarts 3 --rdzv-backend c10d"
            f" --rdzv-endpoint 10.0.0.1:29733 --rdzv-id elastic-job --rdzv-conf is_host={is_host}"
            f" --local-addr {address} --monitor-interval 1 {ELASTIC_SHIM} {job.layout.code_dir}/train.py --epochs 2"
        )
        assert expected in result.stderr
        assert ("elastic: torchrun with 2 to 3 hosts (1 process(es) each), rendezvous c10d at 10.0.0.1:29733 on "
                "algo-1, at most 3 restart(s)") in result.stderr


def test_max_hosts_defaults_to_the_hosts_and_min_hosts_to_max_hosts(make_job):
    job = _elastic_job(make_job, elastic={"max_restarts": 1}, processes_per_host=2)
    result = job.run("--check", "--current-host", "algo-3")
    assert result.returncode == 0, result.stderr
    assert "--nnodes 3:3 --nproc-per-node 2 --max-restarts 1" in result.stderr
    assert "--rdzv-conf is_host=0 --local-addr 10.0.0.3" in result.stderr


def test_a_sh_entry_point_runs_without_the_shim(make_job):
    job = _elastic_job(make_job, code={"train.sh": "echo hi\n"}, entry_point="train.sh")
    result = job.run("--check", "--current-host", "algo-1")
    assert result.returncode == 0, result.stderr
    assert f"--monitor-interval 1 --no_python bash {job.layout.code_dir}/train.sh" in result.stderr
    assert ELASTIC_SHIM not in result.stderr


def test_a_command_gets_the_settings_as_torchrun_variables(make_job, record_script):
    job = _elastic_job(make_job, hosts=["algo-1", "algo-2"], command="python train.py",
                       host_addresses={"algo-1": LOCAL, "algo-2": LOCAL}, entry_point=None)
    job.write_code("train.py", record_script)
    result = job.run("--current-host", "algo-2")
    assert result.returncode == 0, result.stderr
    env = job.seen("algo-2")["env"]
    assert {k: v for k, v in env.items() if k.startswith("PET_")} == {
        "PET_NNODES": "2:3", "PET_NPROC_PER_NODE": "1", "PET_MAX_RESTARTS": "3", "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{LOCAL}:29733", "PET_RDZV_ID": "elastic-job", "PET_RDZV_CONF": "is_host=0",
        "PET_LOCAL_ADDR": LOCAL, "PET_MONITOR_INTERVAL": "1"}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and env["LOGLEVEL"] == "INFO"
    assert "RANK" not in env and "WORLD_SIZE" not in env and "MASTER_ADDR" not in env  # torchrun's, per process


def test_the_job_s_own_loglevel_is_kept(make_job, record_script):
    job = _elastic_job(make_job, hosts=["algo-1"], command="python train.py", entry_point=None,
                       host_addresses={"algo-1": LOCAL})
    job.write_code("train.py", record_script)
    assert job.run(env={"LOGLEVEL": "WARNING"}).returncode == 0
    assert job.seen("algo-1")["env"]["LOGLEVEL"] == "WARNING"


@pytest.mark.parametrize("elastic, distribution, message", [
    ({"min_hosts": 3, "max_hosts": 2}, "pytorch", "min_hosts 3 is more than max_hosts 2"),
    ({"min_hosts": 0}, "pytorch", "'min_hosts' must be an integer >= 1, got 0"),
    ({"max_restarts": -1}, "pytorch", "'max_restarts' must be an integer >= 0, got -1"),
    ({"min_host": 2}, "pytorch", "unknown key 'min_host'"),
    ([2, 3], "pytorch", "'elastic' must be an object"),
    ({"min_hosts": 2}, "mpi", "'elastic' needs distribution pytorch"),
])
def test_a_bad_elastic_section_is_refused_before_anything_runs(make_job, elastic, distribution, message):
    job = make_job(hosts=HOSTS, distribution=distribution, elastic=elastic)
    result = job.run("--current-host", "algo-1")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert message in job.failure


# --------------------------------------------------------------------------- the worker shim


def _run_shim(tmp_path, script: str, *args: str, env: dict | None = None):
    path = tmp_path / "script.py"
    path.write_text(script)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    environ = {**os.environ, "TRAINING_ELASTIC_STATE": str(state), "TRAINING_ELASTIC_CHECKPOINTS": str(tmp_path / "ck"),
               "RANK": "1", "LOCAL_RANK": "0", "GROUP_WORLD_SIZE": "3", "WORLD_SIZE": "3", "GROUP_RANK": "1",
               **(env or {})}
    result = subprocess.run([sys.executable, ELASTIC_SHIM, str(path), *args], capture_output=True, text=True,
                            env=environ, timeout=60)
    notes = {p.name: p.read_text() for p in state.iterdir()}
    return result, notes


def test_the_shim_runs_the_script_as_python_would(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    result, notes = _run_shim(tmp_path, "import sys, helper\nif __name__ == '__main__':\n"
                                        "    print(sys.argv, helper.VALUE)\n", "--epochs", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"[{str(tmp_path / 'script.py')!r}, '--epochs', '2'] 42"
    assert notes == {"starts": "1"}
    assert ("[train] elastic: workers started in a group of 3 host(s), world size 3; this host is group rank 1; no "
            "checkpoint yet: the script starts from the beginning") in result.stderr


def test_the_shim_says_a_re_formation_and_the_newest_checkpoint(tmp_path):
    (tmp_path / "ck" / "sub").mkdir(parents=True)
    (tmp_path / "ck" / "old.pt").write_text("x")
    os.utime(tmp_path / "ck" / "old.pt", (1, 1))
    (tmp_path / "ck" / "sub" / "step-7.pt").write_text("y")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "starts").write_text("1")
    result, notes = _run_shim(tmp_path, "pass\n", env={"TORCHELASTIC_RESTART_COUNT": "1",
                                                       "TORCHELASTIC_MAX_RESTARTS": "3"})
    assert result.returncode == 0, result.stderr
    assert notes["starts"] == "2"
    assert ("elastic: the group re-formed (start 2 on this host, torchrun restart 1 of 3): 3 host(s), world size 3; "
            "this host is group rank 1; newest checkpoint sub/step-7.pt (written ") in result.stderr


@pytest.mark.parametrize("script, code, what", [
    ("raise ValueError('bad learning rate')\n", 1, "ValueError: bad learning rate"),
    ("import sys\nsys.exit(3)\n", 3, "sys.exit(3)"),
    ("import sys\nsys.exit('no data')\n", 1, "sys.exit('no data')"),
])
def test_the_script_s_own_error_is_recorded_as_a_user_error(tmp_path, script, code, what):
    result, notes = _run_shim(tmp_path, script)
    assert result.returncode == code, result.stderr
    summary, _, details = notes["user-error"].partition("\n")
    assert summary == what
    assert f"[train] elastic: rank 1 failed in the script itself ({what}): not restarting" in result.stderr
    if "ValueError" in script:
        assert "Traceback" in result.stderr and details.startswith("Rank 1:\nTraceback")
    assert "peer-lost" not in notes


def test_a_lost_peer_is_recorded_and_the_process_fails_as_it_would(tmp_path):
    script = ("raise RuntimeError('[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
              "[127.0.0.1]:4071. This is typically caused by a remote worker crashing.')\n")
    result, notes = _run_shim(tmp_path, script, env={"TM_HOSTS": json.dumps(["localhost"])})
    assert result.returncode == 1
    assert "user-error" not in notes and notes["peer-lost"].startswith("RuntimeError: [../third_party/gloo")
    assert "[train] elastic: lost a peer (localhost at 127.0.0.1): RuntimeError:" in result.stderr
    assert "torchrun restarts this host's processes and re-forms the group" in result.stderr


def test_peer_loss_is_told_by_type_and_by_message():
    class DistError(RuntimeError):
        pass

    class DistNetworkError(DistError):
        pass

    fake = type(sys)("torch.distributed")
    fake.DistError = DistError
    saved = sys.modules.get("torch.distributed")
    sys.modules["torch.distributed"] = fake
    try:
        assert elastic_worker.is_peer_loss(DistNetworkError("anything"))
        try:
            try:
                raise OSError("NCCL communicator was aborted on rank 2")
            except OSError as cause:
                raise ValueError("wrapped") from cause
        except ValueError as error:
            assert elastic_worker.is_peer_loss(error)
        assert not elastic_worker.is_peer_loss(ValueError("bad learning rate"))
        assert not elastic_worker.is_peer_loss(KeyError("label"))
    finally:
        if saved is None:
            del sys.modules["torch.distributed"]
        else:
            sys.modules["torch.distributed"] = saved


def test_the_shim_signals_only_a_torchrun_parent(tmp_path):
    """Run under a parent that is not torchrun (this test), a user error must not signal it."""
    result, notes = _run_shim(tmp_path, "raise ValueError('x')\n")
    assert result.returncode == 1 and "user-error" in notes  # and this test process is still here


# --------------------------------------------------------------------------- real torchrun groups

TRAIN = """\
import json, os, time
import torch
import torch.distributed as dist
if os.environ.get("SM_HP_FAIL"):  # before the group forms: no host's error can reach the other as a lost peer
    raise ValueError("learning rate must be positive")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ck = os.path.join(os.environ["PAI_OUTPUT_CHECKPOINTS"], "state.json")
state = json.load(open(ck)) if os.path.exists(ck) else {"step": 0, "total": 0.0}
if state["step"]:
    print(f"rank={rank} resumed from checkpoint step {state['step']}", flush=True)
steps = int(os.environ["SM_HP_STEPS"])
while state["step"] < steps:
    value = torch.ones(1)
    dist.all_reduce(value)
    state = {"step": state["step"] + 1, "total": state["total"] + value.item() / world}
    if rank == 0:
        with open(ck + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(ck + ".tmp", ck)
    print(f"rank={rank} world={world} step={state['step']}", flush=True)
    time.sleep(0.3)
if rank == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump(state, f)
"""


def _group(make_job, hosts, **hyperparameters):
    return make_job(hosts=hosts, distribution="pytorch", job_name="elastic-group", master_port=_free_port(),
                    host_addresses={h: LOCAL for h in hosts}, code={"train.py": TRAIN},
                    elastic={"min_hosts": len(hosts), "max_hosts": len(hosts), "max_restarts": 2},
                    hyperparameters=hyperparameters)


def _start(job, host, log: Path):
    with open(log, "w") as out:
        return job.start("--current-host", host, stdout=out, stderr=subprocess.STDOUT)


def test_the_script_s_own_error_fails_every_host_at_once_without_a_restart(make_job, tmp_path):
    job = _group(make_job, HOSTS[:2], steps=5, fail=1)
    started = time.monotonic()
    procs = {h: _start(job, h, tmp_path / f"{h}.log") for h in HOSTS[:2]}
    codes = {h: p.wait(timeout=120) for h, p in procs.items()}
    logs = {h: (tmp_path / f"{h}.log").read_text() for h in HOSTS[:2]}
    # Host 1 fails with the script's error. Host 2 does too, or, on a busy machine, first loses the rendezvous store
    # that host 1's stopped agent held (exit 4, a platform error: on Kubernetes the Job has failed on host 1's exit 1
    # already). Neither restarts, and the job's reason is the script's error whichever host wrote first.
    assert codes["algo-1"] == 1 and codes["algo-2"] in (1, 4), logs
    for log in logs.values():
        assert "will restart worker group" not in log and "re-formed" not in log
    assert "ValueError: learning rate must be positive (the script's own error: elastic training does not restart " \
           "it)" in logs["algo-1"]
    assert job.failure.startswith("the user code (entry point train.py) failed with exit code 1: ValueError: learning")
    assert "Rank " in job.failure and 'raise ValueError("learning rate must be positive")' in job.failure
    print(f"\nelastic user error on 2 local hosts: {time.monotonic() - started:.1f}s")


@pytest.mark.slow
def test_a_host_stopped_mid_training_and_started_again_rejoins_and_the_group_resumes(make_job, tmp_path):
    job = _group(make_job, HOSTS[:2], steps=25)
    started = time.monotonic()
    first = _start(job, "algo-1", tmp_path / "algo-1.log")
    second = _start(job, "algo-2", tmp_path / "algo-2.log")
    deadline = time.monotonic() + 120
    while "step=4" not in (tmp_path / "algo-2.log").read_text():
        assert time.monotonic() < deadline and first.poll() is None, (tmp_path / "algo-1.log").read_text()
        time.sleep(0.2)
    second.send_signal(signal.SIGTERM)  # as Kubernetes stops a deleted pod's train
    assert second.wait(timeout=60) == 128 + signal.SIGTERM
    again = _start(job, "algo-2", tmp_path / "algo-2-again.log")
    assert first.wait(timeout=180) == 0, (tmp_path / "algo-1.log").read_text()[-3000:]
    assert again.wait(timeout=60) == 0, (tmp_path / "algo-2-again.log").read_text()[-3000:]
    log = (tmp_path / "algo-1.log").read_text()
    assert log.count("[train] elastic: lost a peer") == 1 and log.count("elastic: the group re-formed") == 1, log[-3000:]
    assert "rank=0 resumed from checkpoint step" in log or "rank=1 resumed from checkpoint step" in log
    assert "elastic: finished; the workers of this host started 2 time(s)" in log
    rejoined = (tmp_path / "algo-2-again.log").read_text()
    assert "newest checkpoint state.json" in rejoined and "resumed from checkpoint step" in rejoined
    model = json.loads(Path(job.layout.model_dir, "model.json").read_text())
    assert model == {"step": 25, "total": 25.0}  # every step counted once: resumed, not repeated or lost
    assert job.succeeded and job.failure is None  # the stopped host's failure is not the job's
    print(f"\nelastic: host stopped and restarted on 2 local hosts: {time.monotonic() - started:.1f}s")

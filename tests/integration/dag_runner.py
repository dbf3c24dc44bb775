"""Running the real DAGs in-process with dag.test() against the session's migrated metadata DB."""

from __future__ import annotations

import io
import json
import runpy
import tarfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_dag(file_name: str, dag_id: str | None = None):
    namespace = runpy.run_path(str(REPO / "dags" / file_name))
    dags = [v for v in namespace.values() if type(v).__name__ == "DAG"]
    return next(d for d in dags if dag_id in (None, d.dag_id))


class DagRunResult(tuple):
    """(state, {task_id: state}, {task_id: return value}) plus the run id."""

    run_id: str


def run_dag(dag, conf: dict | None = None) -> DagRunResult:
    """One DAG run; returns (state, {task_id: state}, {task_id: return value}) with .run_id."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dr = dag.test(run_conf=conf)
    with create_session() as session:
        states = {ti.task_id: ti.state for ti in dr.get_task_instances(session=session)}
        rows = session.scalars(
            XComModel.get_many(run_id=dr.run_id, dag_ids=dag.dag_id, key="return_value")
        ).all()
        values = {row.task_id: XComModel.deserialize_value(row) for row in rows}
    result = DagRunResult((dr.state, states, values))
    result.run_id = dr.run_id
    return result


def asset_events(asset_name: str, run_id: str | None = None) -> list[dict]:
    """The extras of the events of an Asset (optionally only those a given run emitted)."""
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(
            AssetModel.name == asset_name)
        if run_id is not None:
            query = query.where(AssetEvent.source_run_id == run_id)
        return [dict(event.extra or {}) for event in session.scalars(query.order_by(AssetEvent.id))]


def model_json(object_store, bucket, key) -> dict:
    """model.json out of the model.tar.gz a run published."""
    with tarfile.open(fileobj=io.BytesIO(object_store.get(bucket, key))) as tar:
        return json.load(tar.extractfile("model.json"))


def put_code(object_store, bucket, files: dict[str, str], prefix="code/"):
    for name, text in files.items():
        object_store.put(bucket, prefix + name, text.encode())


# Two or more hosts' PyTorch DDP over gloo, the same script on every backend: rank 0 writes the all-reduced sum.
DDP_SCRIPT = textwrap.dedent('''
    import json, os
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    print(f"rank={rank} world={world} allreduce={value.item()}", flush=True)
    if rank == 0:
        json.dump({"sum": value.item(), "world": world, "master": os.environ["MASTER_ADDR"],
                   "hosts": json.loads(os.environ["TM_HOSTS"])},
                  open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w"))
    dist.destroy_process_group()
''')


# Elastic training (issue 38): DDP over gloo on a one-weight model, a checkpoint after every step (rank 0), resumed from
# it after a restart; the hyperparameter fail makes every rank raise before training (the script's own error).
ELASTIC_DDP = """\
import json, os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# The script's own error, on every rank (exit code 1), before the group forms: else a rank whose error came first
# could be seen by another, still forming the group, as a lost peer (a restart) on a busy machine.
if os.environ.get("SM_HP_FAIL"):
    raise ValueError("learning rate must be positive")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = DistributedDataParallel(torch.nn.Linear(1, 1, bias=False))
torch.nn.init.zeros_(model.module.weight)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
ck = os.path.join(os.environ["PAI_OUTPUT_CHECKPOINTS"], "state.pt")
step = 0
if os.path.exists(ck):
    state = torch.load(ck)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = state["step"]
    print(f"rank={rank} resumed from checkpoint step {step}", flush=True)
steps = int(os.environ["SM_HP_STEPS"])
x = torch.tensor([[1.0]])
while step < steps:
    optimizer.zero_grad()
    loss = ((model(x) - 2.0) ** 2).mean()  # w -> 2
    loss.backward()  # DDP averages the gradient over the hosts
    optimizer.step()
    step += 1
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, ck + ".tmp")
        os.replace(ck + ".tmp", ck)
    print(f"rank={rank} world={world} step={step} loss={loss.item():.6f}", flush=True)
    time.sleep(0.4)
if rank == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"w": model.module.weight.item(), "step": step}, f)
"""


def expected_weight(steps: int) -> float:
    """Full-batch gradient descent on (w - 2)^2 from w = 0, lr 0.1: the same whoever computes it, however often
    the group re-forms, when each step is taken exactly once."""
    w = 0.0
    for _ in range(steps):
        w -= 0.1 * 2 * (w - 2.0)
    return w


# A hostile training script (issue 23): it leaves links to files outside its job root at every name the platform reads
# or writes, then succeeds (or fails, with --fail). The link targets are host paths the script cannot see; where a
# check inside the training needs the target to exist (the runtime keeps a non-empty output/failure), it makes a decoy
# at the same path in its own /tmp, which on the host is the real file.
HOSTILE_SCRIPT = textwrap.dedent('''
    import argparse, json, os, sys
    p = argparse.ArgumentParser()
    for name in ("secret", "secret_dir", "victim", "fail"):
        p.add_argument("--" + name)
    a = p.parse_args()
    model, data = os.environ["TM_MODEL_DIR"], os.environ["TM_OUTPUT_DATA_DIR"]
    output, ckpt = os.path.dirname(data), os.environ["PAI_OUTPUT_CHECKPOINTS"]
    for d in (model, data, ckpt):
        os.makedirs(d, exist_ok=True)
    json.dump({"ok": True}, open(os.path.join(model, "model.json"), "w"))
    open(os.path.join(data, "predictions.txt"), "w").write("real output")
    open(os.path.join(ckpt, "real.pt"), "w").write("real checkpoint")

    def link(target, *where):
        path = os.path.join(*where)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(target, path)
        print("hostile: linked", os.path.relpath(path, os.path.dirname(output)), flush=True)

    link(a.secret, model, "x")
    link(a.secret_dir, model, "secrets_dir")
    link(a.secret, data, "leak")
    link(a.secret, ckpt, "leak.pt")
    link(a.secret_dir, ckpt, "leak_dir")
    link(a.secret, output, "metrics.jsonl")
    for name in ("metrics.json", "metrics.json.tmp", "failure.tmp", "success.tmp"):
        link(a.victim, output, name)
    print("loss=0.5", flush=True)
    if a.fail == "yes":
        if not os.path.exists(a.secret):  # sandboxed, as it must be: a decoy keeps the runtime off output/failure
            os.makedirs(os.path.dirname(a.secret), exist_ok=True)
            open(a.secret, "w").write("decoy")
        link(a.secret, output, "failure")
        sys.exit(3)
''')


def hostile_world(tmp_path) -> dict:
    """Outside any job root: a secret file and a secret directory (what the links aim at), and a root-owned 0600
    file the links ask the worker to overwrite."""
    import os
    import secrets

    outside = tmp_path / "outside"
    (outside / "secret_dir").mkdir(parents=True)
    token = f"SECRET-{secrets.token_hex(12)}"
    (outside / "airflow-secrets.env").write_text(f"AIRFLOW__API_AUTH__JWT_SECRET={token}\n")
    (outside / "secret_dir" / "admin-password.txt").write_text(token)
    victim = outside / "victim"
    victim.write_text("root-owned, must not change\n")
    os.chmod(victim, 0o600)
    return {"token": token, "victim": victim, "victim_text": victim.read_text(),
            "hyperparameters": {"secret": str(outside / "airflow-secrets.env"),
                                "secret_dir": str(outside / "secret_dir"), "victim": str(victim)}}


HOSTILE_LINKS = ("model/x", "model/secrets_dir", "output/data/leak", "checkpoints/leak.pt", "checkpoints/leak_dir")


def assert_published_without_links(object_store, bucket: str, job_name: str, log: str) -> None:
    """The hostile script's job published its regular files only (model, output data, checkpoint), and the task log
    names every link it skipped."""
    for archive, names in (("model.tar.gz", ["model.json"]), ("output.tar.gz", ["predictions.txt"])):
        blob = object_store.get(bucket, f"models/{job_name}/output/{archive}")
        with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
            assert tf.getnames() == names, archive
    # the job's one regular checkpoint file, and the platform's claim of the checkpoint_path (docs/security.md)
    assert object_store.keys(bucket, "ckpt/") == ["ckpt/.training-owner.json", "ckpt/real.pt"]
    for link in HOSTILE_LINKS:
        assert f"Skipped {link} " in log, link


def assert_nothing_leaked(world: dict, blobs: dict[str, bytes]) -> None:
    """The secret's bytes are in none of `blobs` (archives are checked unpacked too), and the victim is unchanged."""
    import gzip
    import os
    import stat

    token = world["token"].encode()
    for name, blob in blobs.items():
        assert token not in blob, f"the secret leaked into {name}"
        if blob[:2] == b"\x1f\x8b":
            assert token not in gzip.decompress(blob), f"the secret leaked into {name} (compressed)"
    victim = world["victim"]
    st = os.lstat(victim)
    assert stat.S_ISREG(st.st_mode) and (st.st_mode & 0o777) == 0o600
    assert victim.read_text() == world["victim_text"], "a file outside the job was overwritten"

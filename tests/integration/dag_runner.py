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

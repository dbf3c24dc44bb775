"""Running the real DAGs in-process with dag.test() against the session's migrated metadata DB."""

from __future__ import annotations

import runpy
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

"""Many real-looking training jobs in a metadata DB, in seconds: one finished run's rows copied (the jobs-list test in
tests/integration/test_ui_server.py on the served Airflow's PostgreSQL, and bench/bench_console.py on SQLite)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, inspect, text

# A task instance's id is a UUID: what each database writes a fresh one with.
_NEW_UUID = {"sqlite": "lower(hex(randomblob(16)))", "postgresql": "gen_random_uuid()"}


def clone_run(db: Path | str, dag_id: str, run_id: str, copies: int, first: int = 0) -> None:
    """Copy one finished run (dag_run, task_instance, xcom rows) `copies` times (run ids `<run_id>-copy<n>`,
    n from `first`), straight in the metadata DB (a SQLAlchemy URL, or a SQLite file's path): a thousand
    real-looking jobs in seconds, not hours of training."""
    url = db if isinstance(db, str) and "://" in db else f"sqlite:///{db}"
    engine = create_engine(url, connect_args={"timeout": 60} if url.startswith("sqlite") else {})
    try:
        with engine.begin() as con:
            tables = inspect(con)

            def columns(table):
                return [column["name"] for column in tables.get_columns(table)]

            run_cols = [c for c in columns("dag_run") if c != "id"]
            ti_cols = columns("task_instance")
            xcom_cols = columns("xcom")
            source_id = con.execute(text("SELECT id FROM dag_run WHERE dag_id = :dag AND run_id = :run"),
                                    {"dag": dag_id, "run": run_id}).scalar_one()
            for n in range(first, first + copies):
                new = {"new": f"{run_id}-copy{n:04d}", "dag": dag_id, "run": run_id, "source": source_id}
                # (dag_id, logical_date) is unique: the copies have none
                values = [{"run_id": ":new", "logical_date": "NULL"}.get(c, c) for c in run_cols]
                new["new_id"] = con.execute(text(
                    f"INSERT INTO dag_run ({', '.join(run_cols)}) SELECT {', '.join(values)} FROM dag_run "
                    "WHERE id = :source RETURNING id"), new).scalar_one()
                values = [{"run_id": ":new", "id": _NEW_UUID[engine.dialect.name]}.get(c, c) for c in ti_cols]
                con.execute(text(f"INSERT INTO task_instance ({', '.join(ti_cols)}) SELECT {', '.join(values)} "
                                 "FROM task_instance WHERE dag_id = :dag AND run_id = :run"), new)
                values = [{"run_id": ":new", "dag_run_id": ":new_id"}.get(c, c) for c in xcom_cols]
                # by dag_run_id (the primary key's first column): xcom has no (dag_id, run_id) index
                con.execute(text(f"INSERT INTO xcom ({', '.join(xcom_cols)}) SELECT {', '.join(values)} FROM xcom "
                                 "WHERE dag_run_id = :source"), new)
    finally:
        engine.dispose()

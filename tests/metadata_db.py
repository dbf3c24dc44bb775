"""Many real-looking training jobs in a SQLite metadata DB, in seconds: one finished run's rows copied (the jobs-list
test in tests/integration/test_ui_server.py and bench/bench_console.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def clone_run(db: Path | str, dag_id: str, run_id: str, copies: int, first: int = 0) -> None:
    """Copy one finished run (dag_run, task_instance, xcom rows) `copies` times (run ids `<run_id>-copy<n>`,
    n from `first`), straight in the SQLite metadata DB: a thousand real-looking jobs in seconds, not hours of training."""
    with sqlite3.connect(db, timeout=60) as con:
        def columns(table):
            return [row[1] for row in con.execute(f"PRAGMA table_info({table})")]

        run_cols = [c for c in columns("dag_run") if c != "id"]
        ti_cols = columns("task_instance")
        xcom_cols = columns("xcom")
        (source_id,) = con.execute("SELECT id FROM dag_run WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)).fetchone()
        for n in range(first, first + copies):
            new = f"{run_id}-copy{n:04d}"
            values = [{"run_id": "?", "logical_date": "NULL"}.get(c, c) for c in run_cols]  # (dag_id, logical_date) is unique
            new_id = con.execute(f"INSERT INTO dag_run ({', '.join(run_cols)}) SELECT {', '.join(values)} FROM dag_run "
                                 "WHERE id = ?", (new, source_id)).lastrowid
            values = [{"run_id": "?", "id": "lower(hex(randomblob(16)))"}.get(c, c) for c in ti_cols]
            con.execute(f"INSERT INTO task_instance ({', '.join(ti_cols)}) SELECT {', '.join(values)} "
                        "FROM task_instance WHERE dag_id = ? AND run_id = ?", (new, dag_id, run_id))
            values = [{"run_id": "?", "dag_run_id": "?"}.get(c, c) for c in xcom_cols]
            args = [new if c == "run_id" else new_id for c in xcom_cols if c in ("run_id", "dag_run_id")]
            # by dag_run_id (the primary key's first column): xcom has no (dag_id, run_id) index
            con.execute(f"INSERT INTO xcom ({', '.join(xcom_cols)}) SELECT {', '.join(values)} FROM xcom "
                        "WHERE dag_run_id = ?", (*args, source_id))

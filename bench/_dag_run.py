"""Run a DAG with dag.test() in this (fresh) process, N times, and print per-task durations as JSON (benchmark 4, 5).

    python bench/_dag_run.py DAG_FILE DAG_ID RUNS [CONF_JSON]

Per run: the run's wall time, its CPU (this process and its children: the tasks run in it) and each task instance's state and duration as the metadata DB recorded them, plus the
number of metadata-DB statements the run issued (counted with a SQLAlchemy engine event). The first run of a
process also pays imports; the caller decides which runs to count.
"""

from __future__ import annotations

import json
import resource
import runpy
import sys
import time


def _db_bytes() -> int:
    """Size of the SQLite metadata DB and its WAL (0 for other databases)."""
    import os

    from airflow.configuration import conf

    url = conf.get("database", "sql_alchemy_conn")
    if not url.startswith("sqlite:///"):
        return 0
    path = url[len("sqlite:///"):]
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _cpu_seconds() -> float:
    """CPU of this process (dag.test runs the tasks in it) and of its waited-for children (the `train` runtime)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    dag_file, dag_id, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conf = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    import logging

    from sqlalchemy import event

    from airflow import settings
    from airflow.utils.session import create_session

    statements = {"n": 0}

    @event.listens_for(settings.engine, "before_cursor_execute")
    def count(*_args, **_kwargs):
        statements["n"] += 1

    logging.getLogger("airflow").setLevel(logging.WARNING)
    out = []
    for i in range(runs):
        t_parse = time.perf_counter()
        namespace = runpy.run_path(dag_file)  # a fresh DAG object per run: dag.test() keeps the last conf
        parse = time.perf_counter() - t_parse
        dag = next(v for v in namespace.values() if type(v).__name__ == "DAG" and v.dag_id == dag_id)
        before = statements["n"]
        db_before = _db_bytes()
        t0, cpu0 = time.perf_counter(), _cpu_seconds()
        dr = dag.test(run_conf=dict(conf, job_name=f"{conf['job_name']}-{i}") if conf and "job_name" in conf else conf)
        wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
        db_statements = statements["n"] - before
        with create_session() as session:
            tis = [
                {
                    "task_id": ti.task_id,
                    "map_index": ti.map_index,
                    "state": str(ti.state),
                    "duration": (ti.end_date - ti.start_date).total_seconds() if ti.end_date and ti.start_date else None,
                    "start": ti.start_date.timestamp() if ti.start_date else None,
                    "end": ti.end_date.timestamp() if ti.end_date else None,
                }
                for ti in dr.get_task_instances(session=session)
            ]
        out.append({"run": i, "state": str(dr.state), "wall": wall, "cpu": cpu, "parse": parse, "db_statements": db_statements,
                    "db_bytes_added": _db_bytes() - db_before, "tasks": tis})
    print("BENCH-RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()

"""Benchmark 6: the Training jobs list (plugins/training_console) with 1,000 and 10,000 jobs in the metadata DB.

    .venv/bin/python bench/bench_console.py             # 1,000 and 10,000 jobs
    .venv/bin/python bench/bench_console.py --quick     # 1,000 jobs

One training_job run (a no-op training printing `loss=0.5`, dag.test() on SQLite, output on the loopback S3 server)
is copied N times straight in the metadata DB (tests/metadata_db.py, as the UI test does), then the list is
timed in this process, as the API server's route runs it: `load_jobs_cached` + `query_items`. "Full load" is the
first page after a change to the DB (a running job changes it all the time: the cache is then read again);
"cached" is every later page while nothing changed. Each query is the median of --repeats runs.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import REPO, RESULTS_DIR, load_average, markdown_table, remove, save_results, tests_module  # noqa: E402
from bench_pipeline import airflow_and_s3, run_dag  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "plugins"))  # training_console, as the API server loads it

clone_run = tests_module("metadata_db").clone_run

BUCKET = "bench-console"
QUERIES = {  # what the list page asks for (tests/integration/test_ui_server.py asks the same through HTTP)
    "newest first": {},
    "sorted by loss": {"sort": "metric:loss", "descending": False},
    "filtered": {"q": "bench", "status": "succeeded"},
    "page 10": {"offset": 450},
}
GOAL_S = 0.5  # a page of the list, cached, with 1,000 jobs


def time_pages(repeats: int) -> dict:
    from airflow.utils.session import create_session
    from training_console import jobs as console

    full, cached = [], {name: [] for name in QUERIES}
    total = 0
    for _ in range(repeats):
        console._CACHE.clear()
        with create_session() as session:
            start = time.perf_counter()
            listed = console.load_jobs_cached(session, dag_ids=["training_job"])
            page = console.query_items(listed, limit=50)
            full.append(time.perf_counter() - start)
            total = page["total"]
            for name, query in QUERIES.items():
                start = time.perf_counter()
                listed = console.load_jobs_cached(session, dag_ids=["training_job"])
                page = console.query_items(listed, limit=50, **query)
                cached[name].append(time.perf_counter() - start)
                assert len(page["items"]) == 50, (name, page["total"])
    return {"jobs": total, "full_load": statistics.median(full),
            "cached": {name: statistics.median(v) for name, v in cached.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work-console"))
    args = parser.parse_args()
    sizes = [1000] if args.quick else [1000, 10000]

    workdir = os.path.abspath(args.workdir)
    remove(workdir)  # a fresh metadata DB: the job counts below are all there is
    env, server = airflow_and_s3(workdir, "console")
    try:
        server.create_bucket(BUCKET)
        code = os.path.join(workdir, "code")
        os.makedirs(code)
        with open(os.path.join(code, "train.py"), "w") as fh:
            fh.write("print('loss=0.5', flush=True)\n")
        conf = {"job_name": f"bench-console-{int(time.time())}", "source_dir": code, "entry_point": "train.py",
                "output_path": f"s3://{BUCKET}/models", "backend": "local",
                "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
        print(f"== one training_job run; load {load_average()[0]:.2f}", flush=True)
        run_dag(env, workdir, os.path.join(REPO, "dags", "training_job.py"), "training_job", 1, conf)
    finally:
        server.stop()

    db = os.path.join(env["AIRFLOW_HOME"], "airflow.db")
    with sqlite3.connect(db) as con:
        (run_id,) = con.execute("SELECT run_id FROM dag_run WHERE dag_id = 'training_job'").fetchone()
    results, have = [], 1
    for size in sizes:
        start = time.perf_counter()
        clone_run(db, "training_job", run_id, size - have, first=have)
        have = size
        print(f"== {size} jobs (copied in {time.perf_counter() - start:.1f} s); load {load_average()[0]:.2f}",
              flush=True)
        results.append(time_pages(args.repeats))
        results[-1]["size"] = size

    rows = [[r["jobs"], r["full_load"], *r["cached"].values()] for r in results]
    cached_1000 = max(results[0]["cached"].values())
    markdown = (
        f"## Training jobs list (benchmark 6)\n\n`bench/bench_console.py{' --quick' if args.quick else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average at the end "
        f"{load_average()[0]:.2f}; SQLite metadata DB, one page of 50, seconds, median of {args.repeats}:\n\n"
        + markdown_table(["jobs", "full load (after a change)", *(f"cached: {n}" for n in QUERIES)], rows)
        + f"\n\nGoal: a page of 1,000 jobs, cached, < {GOAL_S} s: {cached_1000:.3f} s "
        f"({'yes' if cached_1000 < GOAL_S else 'NO'}).\n"
    )
    save_results("console", {"results": results, "goal_s": GOAL_S, "cached_1000": cached_1000}, markdown)
    print("\n" + markdown)


if __name__ == "__main__":
    main()

"""Benchmark 5: the hyperparameter_search DAG at scale — scheduler and metadata-DB cost per trial.

    .venv/bin/python bench/bench_search.py             # 10 and 50 trials of a no-op training
    .venv/bin/python bench/bench_search.py --quick     # 3 and 10 trials

Each trial is a whole training job (8 task instances of the mapped task group), so a search of N trials is 8N + 3
task instances. Both sizes run with dag.test() in a fresh process (bench/_dag_run.py, one run each, no warm-up:
a search is one run), training a no-op script that prints one `loss=` line, code from a local dir and the output
on the loopback S3 server, early stopping off. Per trial: wall time, task time (the sum of its task instances'
durations), everything else (the scheduling loop of dag.test, state updates, XCom, DB commits), and the
metadata-DB statements and bytes. The marginal cost between the two sizes shows whether it grows linearly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import REPO, RESULTS_DIR, load_average, markdown_table, remove, save_results  # noqa: E402
from bench_pipeline import airflow_and_s3, run_dag  # noqa: E402

BUCKET = "bench-search"
TRIAL_SCRIPT = "import sys\nprint('loss=0.5', flush=True)\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="*", help="trial counts (default 10 50; quick: 3 10)")
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work"))
    args = parser.parse_args()
    sizes = args.sizes or ([3, 10] if args.quick else [10, 50])

    dag_file = os.path.join(REPO, "dags", "hyperparameter_search.py")
    if not os.path.isfile(dag_file):
        markdown = "## Search at scale (benchmark 5)\n\nSkipped: dags/hyperparameter_search.py does not exist yet.\n"
        save_results("search", {"skipped": True}, markdown)
        print(markdown)
        return

    workdir = os.path.abspath(args.workdir)
    env, server = airflow_and_s3(workdir, "search")
    results = {}
    try:
        server.create_bucket(BUCKET)
        code = os.path.join(workdir, "search-code")
        os.makedirs(code, exist_ok=True)
        with open(os.path.join(code, "train.py"), "w") as fh:
            fh.write(TRIAL_SCRIPT)
        remove(os.path.join(workdir, "workspace"))
        for n in sizes:
            conf = {
                "job_name": f"bench-search-{n}-{int(time.time())}",
                "source_dir": code,
                "entry_point": "train.py",
                "output_path": f"s3://{BUCKET}/search",
                "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                "objective": "loss",
                "direction": "minimize",
                "strategy": "random",
                "seed": 1,
                "search_space": {"learning_rate": {"type": "log_uniform", "min": 0.001, "max": 1.0}},
                "max_trials": n,
                "early_stopping": "none",
            }
            print(f"== {n} trials; load {load_average()[0]:.2f}", flush=True)
            run = run_dag(env, workdir, dag_file, "hyperparameter_search", 1, conf)[0]
            trial_tasks = [t for t in run["tasks"] if t["task_id"].startswith("trial.")]
            task_time = sum(t["duration"] or 0 for t in run["tasks"])
            results[n] = {
                "wall": run["wall"],
                "task_instances": len(run["tasks"]),
                "trial_task_instances": len(trial_tasks),
                "task_time": task_time,
                "other_time": run["wall"] - task_time,
                "db_statements": run["db_statements"],
                "db_bytes_added": run["db_bytes_added"],
                "states": sorted({t["state"] for t in run["tasks"]}),
                "per_stage": {
                    stage: statistics.median(t["duration"] for t in trial_tasks if t["task_id"] == stage)
                    for stage in sorted({t["task_id"] for t in trial_tasks})
                },
            }
    finally:
        server.stop()

    rows = []
    for n, r in results.items():
        rows.append([n, r["task_instances"], r["wall"], r["wall"] / n, r["task_time"] / n, r["other_time"] / n,
                     r["db_statements"] / n, r["db_bytes_added"] / n / 1024])
    if len(sizes) >= 2:
        a, b = results[sizes[0]], results[sizes[-1]]
        dn = sizes[-1] - sizes[0]
        rows.append([f"marginal {sizes[0]}->{sizes[-1]}", b["task_instances"] - a["task_instances"],
                     b["wall"] - a["wall"], (b["wall"] - a["wall"]) / dn, (b["task_time"] - a["task_time"]) / dn,
                     (b["other_time"] - a["other_time"]) / dn, (b["db_statements"] - a["db_statements"]) / dn,
                     (b["db_bytes_added"] - a["db_bytes_added"]) / dn / 1024])
    largest = results[sizes[-1]]
    stage_rows = [[stage, d] for stage, d in largest["per_stage"].items()]
    markdown = (
        f"## Search at scale (benchmark 5)\n\n`bench/bench_search.py{' --quick' if args.quick else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average at the end {load_average()[0]:.2f}; "
        "hyperparameter_search with a no-op training, dag.test() on SQLite, trials run one after another.\n\n"
        + markdown_table(
            ["trials", "task instances", "wall s", "wall s / trial", "task time s / trial",
             "scheduling + DB s / trial", "DB statements / trial", "DB KiB / trial"],
            rows,
        )
        + f"\n\nMedian duration of each trial stage ({sizes[-1]} trials):\n\n"
        + markdown_table(["task", "s"], stage_rows)
    )
    save_results("search", {"sizes": sizes, "results": results}, markdown)
    print("\n" + markdown)


if __name__ == "__main__":
    main()

"""Run every benchmark (what `make bench` calls), then write bench/results/latest.md: the tables and the goals.

    .venv/bin/python bench/run_all.py                  # full sizes (~25 min on 2 idle cores; + ~6 min as root: the
                                                       # cluster-staging benchmark starts a real node)
    .venv/bin/python bench/run_all.py --quick          # small sizes (~5 min)
    .venv/bin/python bench/run_all.py --only staging pack_upload

The machine is shared: each benchmark waits (up to --max-wait seconds) for the 1-minute load average to drop
below --max-load before it starts, and the table records the load it ran under.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BENCH_DIR, RESULTS_DIR, tool, wait_for_low_load  # noqa: E402

BENCHMARKS = [  # the search benchmark last: it depends on the newest DAG
    ("staging", "bench_staging.py"),
    ("cluster-staging", "bench_cluster_staging.py"),  # skips (one line) where no real node can run
    ("engines", "bench_engines.py"),
    ("checksums", "bench_checksums.py"),
    ("pack_upload", "bench_pack_upload.py"),
    ("pipeline", "bench_pipeline.py"),
    ("search", "bench_search.py"),
    ("console", "bench_console.py"),
]


def _load(name: str) -> dict | None:
    try:
        with open(os.path.join(RESULTS_DIR, f"{name}.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def goals() -> str:
    """The issue's goals, each with the figure it was judged on."""
    lines = ["## Goals", "", "| goal | figure | holds |", "| --- | --- | --- |"]

    def row(goal: str, figure: str, ok: bool | None) -> None:
        lines.append(f"| {goal} | {figure} | {'yes' if ok else 'no' if ok is not None else 'n/a'} |")

    staging = _load("staging")
    if staging:
        for name, data in staging["datasets"].items():
            g = data["goals"]
            small = data["count"] > 1
            # issue 25: many small objects >= 1.2x s5cmd, 1 MiB objects >= 1.0x, one large object >= 0.9x
            want = (1.2 if data["size"] <= 64 * 1024 else 1.0) if small else 0.9
            if g.get("cold_vs_s5cmd") is not None:
                row(f"cold staging {name} >= {want}x s5cmd", f"{g['cold_vs_s5cmd']:.2f}x", g["cold_vs_s5cmd"] >= want)
            if g.get("cold_vs_s5cmd_stored_checksum") is not None:  # issue 48: verified by the stored CRC64NVME
                stored = g["cold_vs_s5cmd_stored_checksum"]
                row(f"cold staging {name}, platform-uploaded (CRC64NVME), >= {want}x s5cmd", f"{stored:.2f}x",
                    stored >= want)
            if small and g.get("cold_vs_aws") is not None:
                row(f"cold staging {name} >= 2x `aws s3 sync`", f"{g['cold_vs_aws']:.2f}x", g["cold_vs_aws"] >= 2.0)
            cpu = {r["name"]: 1000 * r["cpu_median"] / data["count"] for r in data["cold"]}
            ours = cpu.get("ours: DataCacheHook.prefetch")
            if small and ours is not None and "s5cmd cp" in cpu:
                row(f"client CPU per object, {name} (prefetch vs s5cmd)",
                    f"{ours:.2f} ms vs {cpu['s5cmd cp']:.2f} ms", None)
            row(f"warm re-stage {name} >= 30x faster than cold", f"{g['warm_speedup']:.1f}x", g["warm_speedup"] >= 30)
            for tool_name, peak in (g.get("peak_mb") or {}).items():
                over = (g.get("peak_over_base_mb") or {}).get(tool_name, 0.0)
                row(f"peak memory of {tool_name.removeprefix('ours: ')}, {name} < 300 MB",
                    f"{peak:.0f} MB ({over:+.0f} MB over the process before it)", peak < 300)
    cluster = _load("cluster-staging")
    if cluster:
        for name, data in cluster["datasets"].items():
            g = data["goals"]
            row(f"cluster path: cold staging {name} >= {g['goal']}x s5cmd in a pod (submitted -> result)",
                f"{g['cold_vs_s5cmd']:.2f}x (in the pod alone {g['in_pod_vs_s5cmd']:.2f}x)",
                g["cold_vs_s5cmd"] >= g["goal"])
            row(f"cluster path: warm re-stage {name} >= 30x faster than cold", f"{g['warm_speedup']:.1f}x",
                g["warm_speedup"] >= 30)
            cpu = g["cpu_ms_per_object"]
            row(f"cluster path: client CPU per object, {name} (step pod vs s5cmd pod)",
                f"{cpu['ours']:.2f} ms vs {cpu['s5cmd']:.2f} ms", None)
    engines = _load("engines")
    if engines:
        for name, data in engines["datasets"].items():
            figures = ", ".join(f"{r['name'].split(' (')[0]} {1000 * r['cpu_median'] / data['count']:.2f} ms"
                                for r in data["runs"])
            row(f"client CPU per object by engine, {name} (the engine behind RemoteStore: least CPU wins)", figures,
                None)
    pack = _load("pack_upload")
    if pack and pack.get("goal_overlap_ratio") is not None:
        r = pack["goal_overlap_ratio"]
        row("pack + upload overlapped <= 1.1x the slower of packing alone and uploading alone",
            f"{r:.2f}x ({pack['overlapped']:.1f} s vs pack {pack['pack_alone']:.1f} s, upload {pack['upload_alone']:.1f} s)",
            r <= 1.1)
        for what, peak in pack["peak_mb"].items():
            over = pack["peak_over_base_mb"][what]
            row(f"peak memory of {'pack + upload' if what == 'pack_upload' else 'upload_file'} < 300 MB",
                f"{peak:.0f} MB ({over:+.0f} MB over the process before it)", peak < 300)
    pipeline = _load("pipeline")
    if pipeline:
        for p in pipeline["parse"]:
            if "parse" in p:
                goal = pipeline.get("parse_goal_s", 0.3)
                row(f"{p['file']} parses in < {goal} s (beyond `import airflow.sdk`)",
                    f"{p['parse']:.3f} s ({p.get('parse_cpu', float('nan')):.3f} s CPU)", p["parse"] < goal)
        if pipeline.get("job_added") is not None:
            row(f"a no-op job adds <= {pipeline['job_goal_s']} s to as many no-op tasks", f"{pipeline['job_added']:+.2f} s",
                pipeline["job_added"] <= pipeline["job_goal_s"])
        for stage, added in pipeline["added"].items():
            row(f"stage {stage} adds < 1 s", f"{added:+.2f} s", added < 1.0)
    console = _load("console")
    if console:
        row(f"a page of the jobs list with 1,000 jobs (cached) < {console['goal_s']} s", f"{console['cached_1000']:.3f} s",
            console["cached_1000"] < console["goal_s"])
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (development)")
    parser.add_argument("--only", nargs="*", choices=[b[0] for b in BENCHMARKS])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-load", type=float, default=1.0, help="wait for a 1-minute load below this")
    parser.add_argument("--max-wait", type=float, default=300, help="seconds to wait for it at most")
    args = parser.parse_args()

    if not tool("pigz"):
        print("note: pigz is not installed (apt-get install -y pigz): the pigz rows are skipped", flush=True)
    failed = []  # a failed benchmark is reported, and the others still run (one broken script hid five)
    for name, script in BENCHMARKS:
        if args.only and name not in args.only:
            continue
        load = wait_for_low_load(args.max_load, args.max_wait)
        print(f"\n##### {script} (load {load:.2f})", flush=True)
        cmd = [sys.executable, os.path.join(BENCH_DIR, script)]
        if args.quick:
            cmd.append("--quick")
        if name != "search":
            cmd += ["--repeats", str(args.repeats)]
        started = time.monotonic()
        returncode = subprocess.run(cmd).returncode
        if returncode != 0:
            failed.append(script)
            # Its results file of an earlier run would pass for this run's in latest.md.
            for ext in ("json", "md"):
                stale = os.path.join(RESULTS_DIR, f"{name}.{ext}")
                if os.path.isfile(stale):
                    os.unlink(stale)
        print(f"##### {script}: {time.monotonic() - started:.0f} s{f', FAILED (exit {returncode})' if returncode else ''}",
              flush=True)

    parts = [f"# Benchmarks ({time.strftime('%Y-%m-%d %H:%M')}{', --quick sizes' if args.quick else ''})", goals()]
    if failed:
        parts.insert(1, "**Failed** (no figures; see the output above): " + ", ".join(f"`{s}`" for s in failed))
    for name, _ in BENCHMARKS:
        path = os.path.join(RESULTS_DIR, f"{name}.md")
        if os.path.isfile(path):
            with open(path) as fh:
                parts.append(fh.read().strip())
    report = "\n\n".join(parts) + "\n"
    os.makedirs(RESULTS_DIR, exist_ok=True)  # absent where every benchmark failed before writing its results
    with open(os.path.join(RESULTS_DIR, "latest.md"), "w") as fh:
        fh.write(report)
    print("\n" + report)
    if failed:
        sys.exit(f"{len(failed)} benchmark(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()

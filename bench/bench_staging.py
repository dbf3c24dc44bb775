"""Benchmarks 1 and 2: staging a channel from object storage, cold and warm, against what users would pick instead.

    .venv/bin/python bench/bench_staging.py            # full sizes: 1,000 x 1 MiB, 10,000 x 16 KiB, 1 x 2 GiB
    .venv/bin/python bench/bench_staging.py --quick    # 100 x 1 MiB, 1,000 x 16 KiB, 1 x 64 MiB

Cold: an empty destination. Ours is DataCacheHook.prefetch (what the prefetch_data stage runs: listing, parallel
download into the shared cache, verification, read-only entry) and ObjectStorageHook.download (the bare transfer);
against `aws s3 sync`, `s5cmd cp` and a plain sequential boto3 loop (list, then GetObject one by one).
Warm: the same channel again with nothing changed. Ours is a cache hit (a fresh hook pair, as a new task builds
it: one listing, zero object bytes); against `aws s3 sync` and `s5cmd sync` into their populated destinations.

The objects of the benchmark are uploaded by `s5cmd cp`, which stores no checksum: ours verifies each single-part
object by its MD5 (the ETag), ~1.65 ms of CPU per MiB. Objects the platform uploads (ObjectStorageHook.upload_dir)
carry a CRC64NVME, verified for ~0.02 ms per MiB; `--platform-uploaded` (default: the datasets of objects below 16 MiB)
stages a second copy of those datasets uploaded that way and adds a cold row of ours for it, in the same round-robin
as s5cmd (which verifies nothing either way).

Everything talks to one MinIO server on loopback (bench/_s3server.py). Ours runs in this process (the stage runs in
an Airflow task process that has already imported Airflow and boto3), with a fresh hook per run, so connection
lookup and client creation are included; the CLI tools are child processes, so their start-up is included (it is
what a user running them pays). CPU is the client's (this process, or the tool and its children); the server's CPU
is shown apart, and so is the peak memory of each run (ours: this process's peak resident memory during the run,
reset before it; the tools: the child's). The server's own ceiling, measured with a trivial client, is printed
first.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (  # noqa: E402
    RESULTS_DIR,
    MiB,
    freeze_imported_heap,
    load_average,
    markdown_table,
    measure_interleaved,
    quiet_logs,
    ratio,
    remove,
    run_quiet,
    save_results,
    setup_airflow_home,
    tool,
)
from _s3server import S3Server  # noqa: E402

KiB = 1024
# Ours on the copy the platform uploaded: each object verified by the CRC64NVME stored with it (the other rows of ours
# verify the s5cmd-uploaded objects by their MD5 ETags).
PLATFORM_ROW = "ours: DataCacheHook.prefetch, platform-uploaded (CRC64NVME)"
BUCKET = "bench-staging"
DATASETS = {
    "full": [("1000 x 1 MiB", 1000, MiB), ("10000 x 16 KiB", 10000, 16 * KiB), ("1 x 2 GiB", 1, 2048 * MiB)],
    "quick": [("100 x 1 MiB", 100, MiB), ("1000 x 16 KiB", 1000, 16 * KiB), ("1 x 64 MiB", 1, 64 * MiB)],
}


def slug(name: str) -> str:
    return name.replace(" ", "").replace("x", "x-").lower()


def make_source(root: str, count: int, size: int) -> str:
    """count files of `size` random bytes (reused across invocations)."""
    marker = os.path.join(root, ".complete")
    if os.path.isfile(marker):
        return root
    remove(root)
    os.makedirs(root)
    for i in range(count):
        with open(os.path.join(root, f"part-{i:05d}.bin"), "wb") as fh:
            remaining = size
            while remaining:
                n = min(remaining, 64 * MiB)
                fh.write(os.urandom(n))
                remaining -= n
    open(marker, "w").close()
    return root


def upload_source(server: S3Server, src: str, prefix: str) -> None:
    s5cmd = tool("s5cmd")
    env = server.tool_env()
    if s5cmd:
        run_quiet([s5cmd, "--endpoint-url", server.url, "cp", "--exclude", ".complete", f"{src}/*", f"s3://{BUCKET}/{prefix}"], env)
    else:
        server.put_tree(BUCKET, prefix, src)
        server.client().delete_object(Bucket=BUCKET, Key=prefix + ".complete")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work"))
    parser.add_argument("--only", nargs="*", help="dataset names to run (default: all)")
    parser.add_argument("--skip-sequential", action="store_true", help="skip the sequential boto3 loop")
    parser.add_argument("--ours-only", action="store_true", help="only our rows (e.g. to compare two versions)")
    parser.add_argument("--skip-aws", action="store_true", help="no awscli rows (its 2 GiB run is the longest)")
    parser.add_argument("--platform-uploaded", choices=["small", "all", "none"], default="small",
                        help="also stage a copy uploaded by the platform (a stored CRC64NVME) of the datasets of "
                             "small objects (< 16 MiB, the default), of all, or of none")
    args = parser.parse_args()

    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    setup_airflow_home(workdir)
    datasets = DATASETS["quick" if args.quick else "full"]
    if args.only:
        datasets = [d for d in datasets if d[0] in args.only or slug(d[0]) in args.only]

    server = S3Server(os.path.join(workdir, "minio-staging.log"))
    server.start()
    os.environ.update(server.airflow_connection_env())
    env = server.tool_env()
    try:
        import boto3  # noqa: F401 - imported up front: the task process has it already

        from operators.cache.data_cache import DataCacheHook
        from operators.settings import training_settings
        from operators.storage.hook import ObjectStorageHook
        from operators.storage.remote import forget_data_loader

        quiet_logs()
        settings = training_settings()
        server.create_bucket(BUCKET)
        ObjectStorageHook(settings=settings).list_objects(f"s3://{BUCKET}/")  # first use: lazy imports, not timed
        freeze_imported_heap()
        aws, s5cmd = (None, None) if args.ours_only else (None if args.skip_aws else tool("aws"), tool("s5cmd"))

        sections = []
        results: dict = {"datasets": {}, "server_ceiling": {}}
        # The server's ceiling: GETs of one object with a trivial client (no signing, no parsing, no files).
        ceiling_rows = []
        def platform_uploaded(size: int) -> bool:
            return args.platform_uploaded == "all" or (args.platform_uploaded == "small" and size < 16 * MiB)

        for name, count, size in datasets:
            src = make_source(os.path.join(workdir, "src", slug(name)), count, size)
            upload_source(server, src, slug(name) + "/")
            if platform_uploaded(size):
                # The same files as the platform uploads them (the upload_artifacts stage, the SDK's channels):
                # each object carries its CRC64NVME, which the download verifies instead of an MD5.
                ObjectStorageHook(settings=settings).upload_dir(src, f"s3://{BUCKET}/{slug(name)}-platform/")
                server.client().delete_object(Bucket=BUCKET, Key=f"{slug(name)}-platform/.complete")
        # Small objects only: 8 threads GETting a 2 GiB object for 4 s measure no request rate and time out at load
        # (`--only 1000x-1mib 1x-2gib` made the 2 GiB object one of "the first two").
        for name, count, size in [d for d in datasets if d[2] <= 16 * MiB][:2]:
            key = f"{slug(name)}/part-00000.bin"
            probe = server.probe_max_rate(BUCKET, key, seconds=4.0, threads=8)
            results["server_ceiling"][name] = probe
            ceiling_rows.append(
                [f"GET one {name.split(' x ')[1]} object", round(probe["requests_per_s"]), probe["mb_per_s"],
                 probe["server_cpu_per_request_ms"], probe["server_cores_busy"],
                 f"{count / probe['requests_per_s']:.1f} s"]
            )
        sections.append(
            f"Server ceiling ({server.name} on loopback, trivial client: 8 threads of raw HTTP/1.1 GETs of one "
            "presigned URL on keep-alive connections, no parsing, no files):\n\n"
            + markdown_table(
                ["request", "req/s", "MB/s", "server CPU ms/req", "server cores busy", "floor for the dataset"],
                ceiling_rows,
            )
        )

        for name, count, size in datasets:
            prefix = slug(name) + "/"
            uri = f"s3://{BUCKET}/{prefix}"
            total = count * size
            dst = os.path.join(workdir, "dst", slug(name))
            cache_dir = os.path.join(dst, "cache")
            platform_cache_dir = os.path.join(dst, "cache-platform")
            paths = {t: os.path.join(dst, t) for t in ("download", "aws", "s5cmd", "seq")}
            print(f"== {name}: {total / MiB:.0f} MiB; load {load_average()[0]:.2f}", flush=True)

            def prefetch() -> dict:
                forget_data_loader()  # a task process parses botocore's data once: so does each run
                entry = DataCacheHook(cache_dir, ObjectStorageHook(settings=settings)).prefetch(uri, user="bench")
                return {"reused": entry.reused, "files": entry.files}

            def prefetch_platform_uploaded() -> dict:
                forget_data_loader()
                entry = DataCacheHook(platform_cache_dir, ObjectStorageHook(settings=settings)).prefetch(
                    f"s3://{BUCKET}/{slug(name)}-platform/", user="bench")
                return {"reused": entry.reused, "files": entry.files}

            def download() -> None:
                forget_data_loader()
                ObjectStorageHook(settings=settings).download(uri, paths["download"])

            def sequential() -> None:
                client = server.client()
                for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
                    for item in page.get("Contents", []):
                        target = os.path.join(paths["seq"], item["Key"][len(prefix):])
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        body = client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"]
                        with open(target, "wb") as fh:
                            while chunk := body.read(MiB):
                                fh.write(chunk)

            def cli(cmd: list[str]):
                return lambda: run_quiet(cmd, env)  # {"peak_mb": the tool's peak memory}

            aws_sync = [aws, "--endpoint-url", server.url, "s3", "sync", uri, paths["aws"], "--only-show-errors"]
            s5_cp = [s5cmd, "--endpoint-url", server.url, "cp", f"{uri}*", paths["s5cmd"] + "/"]
            s5_sync = [s5cmd, "--endpoint-url", server.url, "sync", f"{uri}*", paths["s5cmd"] + "/"]
            def empty(path: str):
                # Each cold run starts with the last run's writes on disk (os.sync): 2 GiB left dirty in the page
                # cache by one tool would otherwise be written back during the next tool's run and throttle its
                # writes (the kernel's dirty limits here are 10 % / 20 % of memory, ~2.2 / 4.4 GB), so a tool's
                # wall depended on which tool ran before it.
                return lambda: (remove(path), os.sync())

            cold_runs = [
                ("ours: DataCacheHook.prefetch", prefetch, empty(cache_dir)),
                ("ours: ObjectStorageHook.download", download, empty(paths["download"])),
            ]
            if platform_uploaded(size):
                cold_runs.append((PLATFORM_ROW, prefetch_platform_uploaded, empty(platform_cache_dir)))
            if aws:
                cold_runs.append(("aws s3 sync", cli(aws_sync), empty(paths["aws"])))
            if s5cmd:
                cold_runs.append(("s5cmd cp", cli(s5_cp), empty(paths["s5cmd"])))
            if not (args.skip_sequential or args.ours_only):
                cold_runs.append(("boto3 sequential loop", sequential, empty(paths["seq"])))
            cold = measure_interleaved(cold_runs, repeats=args.repeats, server_cpu=server.cpu_seconds)
            # Each destination now holds its tool's last cold copy: the warm runs find everything in place.
            warm_runs = [("ours: DataCacheHook.prefetch (cache hit)", prefetch, None)]
            if aws:
                warm_runs.append(("aws s3 sync (nothing to copy)", cli(aws_sync), None))
            if s5cmd:
                warm_runs.append(("s5cmd sync (nothing to copy)", cli(s5_sync), None))
            warm = measure_interleaved(warm_runs, repeats=args.repeats, server_cpu=server.cpu_seconds)
            if any(not s.extra.get("reused") for s in warm[0].samples):
                raise RuntimeError("the warm prefetch was not a cache hit")
            remove(dst)

            by = {r.name: r for r in cold}
            aws_wall = by["aws s3 sync"].wall if "aws s3 sync" in by else 0
            s5_wall = by["s5cmd cp"].wall if "s5cmd cp" in by else 0
            rows = [
                [r.name, r.wall, total / r.wall / 1e6, count / r.wall, r.cpu, 1000 * r.cpu / count, r.server_cpu,
                 r.peak("peak_mb"), ratio(r.wall, aws_wall), ratio(r.wall, s5_wall)]
                for r in cold
            ]
            ours_cold = cold[0].wall
            warm_rows = [[r.name, r.wall, r.cpu, r.server_cpu, ratio(r.wall, ours_cold)] for r in warm]
            ours_peak = {r.name: (r.peak("peak_mb"), r.peak("peak_mb") - min(s.extra["base_mb"] for s in r.samples))
                         for r in cold if r.name.startswith("ours")}
            sections.append(
                f"Cold staging, {name} ({total / MiB:,.0f} MiB), median of {args.repeats}:\n\n"
                + markdown_table(
                    ["tool", "wall s", "MB/s", "files/s", "client CPU s", "client CPU ms/file", "server CPU s",
                     "peak MB", "speed vs aws", "speed vs s5cmd"],
                    rows,
                )
                + f"\n\nWarm re-stage, {name}, nothing changed:\n\n"
                + markdown_table(["tool", "wall s", "client CPU s", "server CPU s", "speed-up vs our cold"], warm_rows)
            )
            results["datasets"][name] = {
                "count": count,
                "size": size,
                "cold": [r.to_dict() for r in cold],
                "warm": [r.to_dict() for r in warm],
                "goals": {
                    "cold_vs_aws": aws_wall / ours_cold if aws_wall else None,
                    "cold_vs_s5cmd": s5_wall / ours_cold if s5_wall else None,
                    # the issue-48 goal's figure where there is one: integrity checked by a stored checksum
                    "cold_vs_s5cmd_stored_checksum": (s5_wall / by[PLATFORM_ROW].wall
                                                      if s5_wall and PLATFORM_ROW in by else None),
                    "warm_speedup": ours_cold / warm[0].wall,
                    "peak_mb": {name: peak for name, (peak, _) in ours_peak.items()},
                    "peak_over_base_mb": {name: over for name, (_, over) in ours_peak.items()},
                },
            }
            print(sections[-1], flush=True)

        header = (
            f"## Staging a channel (benchmarks 1 and 2)\n\n`bench/bench_staging.py{' --quick' if args.quick else ''}`, "
            f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average at the end "
            f"{load_average()[0]:.2f}. Speed ratios: how many times faster ours is (>1 = ours faster). The tools run "
            "round-robin (run 1 of each, then run 2 of each, ...) so that they share the machine's load alike.\n"
        )
        markdown = header + "\n" + "\n\n".join(sections)
        save_results("staging", results, markdown)
        print("\n" + markdown)
    finally:
        server.stop()


if __name__ == "__main__":
    main()

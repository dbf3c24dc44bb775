"""Benchmark: our parallel gzip writer (operators.safe_tar._ParallelGzipWriter) against isal's threaded gzip writer
(`isal.igzip_threaded.open(..., "wb", threads=N)`), both behind the same pack_directory (same tar stream, same
files, level 1 = ISA-L level 1), on a 1 GiB mixed file set:

    .venv/bin/python bench/bench_gzip_writers.py [--repeats 3] [--threads 1,2]

The set (built once under --workdir, reused): 512 MiB of float32 weights drawn from N(0, 0.02) in 4 files (what
trained weights look like to gzip), 256 MiB of random bytes in 2 files (already compressed data: images, zip, npz),
128 MiB of text in 8 files (JSON lines and logs), and 2048 small files of 64 KiB (configs, vocabularies, small
arrays). Runs are interleaved (the machine is shared; see bench/_common.py); wall and CPU seconds are medians.
Every archive is read back once (CRC and length checked): all must hold the same tar stream.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import MiB, RESULTS_DIR, load_average, markdown_table, measure_interleaved, remove, save_results  # noqa: E402


def make_file_set(root: str) -> str:
    import numpy as np

    marker = os.path.join(root, ".complete")
    files = os.path.join(root, "files")
    if os.path.isfile(marker):
        return files
    remove(root)
    os.makedirs(os.path.join(files, "small"))
    rng = np.random.default_rng(7)
    for i in range(4):  # 4 x 128 MiB weights
        with open(os.path.join(files, f"weights-{i}.bin"), "wb") as fh:
            for _ in range(16):
                fh.write((rng.standard_normal(2 * MiB, dtype=np.float32) * 0.02).tobytes())
    for i in range(2):  # 2 x 128 MiB incompressible
        with open(os.path.join(files, f"packed-{i}.npz"), "wb") as fh:
            for _ in range(16):
                fh.write(rng.bytes(8 * MiB))
    for i in range(8):  # 8 x 16 MiB text
        with open(os.path.join(files, f"log-{i}.jsonl"), "w") as fh:
            written, step = 0, 0
            while written < 16 * MiB:
                line = json.dumps({"step": step, "loss": float(rng.random()), "lr": 3e-4, "host": f"algo-{i}",
                                   "msg": "epoch done" if step % 50 == 0 else "batch"}) + "\n"
                fh.write(line)
                written += len(line)
                step += 1
            fh.truncate(16 * MiB)
    words = [f"token{i}" for i in range(50000)]
    for i in range(2048):  # 2048 x 64 KiB small files, half text, half float arrays
        path = os.path.join(files, "small", f"part-{i:04d}")
        if i % 2:
            data = (rng.standard_normal(16 * 1024, dtype=np.float32) * 0.01).tobytes()
        else:
            start = (i * 131) % 40000
            data = ("\n".join(words[start:start + 9000]).encode() * 2)[: 64 * 1024]
        with open(path, "wb") as fh:
            fh.write(data)
    with open(marker, "w") as fh:
        fh.write("1")
    return files


class IsalThreadedWriter:
    """isal.igzip_threaded's writer behind the interface pack_directory gives its gzip writer."""

    BLOCK = 1024 * 1024

    def __init__(self, raw, level: int, threads: int) -> None:
        from isal import igzip_threaded

        self._size = 0
        self._file = igzip_threaded.open(raw, "wb", compresslevel=level, threads=threads)

    def write(self, data) -> int:
        self._size += len(data)
        return self._file.write(data)

    def tell(self) -> int:
        return self._size

    def close(self) -> None:
        self._file.close()

    def abort(self) -> None:
        self._file.close()


def digest(archive: str) -> tuple[int, str]:
    """Length and SHA-256 of the tar stream inside (the reader checks the gzip CRC-32 and length)."""
    import hashlib

    from isal import igzip

    total, sha = 0, hashlib.sha256()
    with igzip.open(archive, "rb") as fh:
        while chunk := fh.read(8 * MiB):
            total += len(chunk)
            sha.update(chunk)
    return total, sha.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--workdir", default=os.path.join(RESULTS_DIR, "work"))
    parser.add_argument("--out", default="/dev/shm", help="where the archives go (tmpfs: no disk in the figures)")
    args = parser.parse_args()

    files = make_file_set(os.path.join(os.path.abspath(args.workdir), "gzip-mixed-1g"))
    content = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(files) for f in fs)
    out_dir = os.path.join(args.out, f"bench-gzip-{os.getpid()}")
    os.makedirs(out_dir, exist_ok=True)
    try:
        bench(args, files, content, out_dir)
    finally:
        remove(out_dir)


def bench(args, files: str, content: int, out_dir: str) -> None:
    import tarfile

    from operators import safe_tar

    ours_class = safe_tar._ParallelGzipWriter
    level = safe_tar._backend_level(1)

    def runner(name: str, writer, threads: int):
        archive = os.path.join(out_dir, f"{name}.tar.gz")

        def run() -> dict:
            safe_tar._ParallelGzipWriter = writer
            try:
                stats = safe_tar.pack_directory(files, archive, 1, threads=threads)
            finally:
                safe_tar._ParallelGzipWriter = ours_class
            return {"size": stats.bytes_out}

        return name, run, None

    # The writers alone: the same uncompressed tar stream (in memory) fed in tarfile's 1 MiB writes, into a
    # sink that only counts; no file reading, no tar headers, no output file.
    plain = os.path.join(out_dir, "plain.tar")
    with tarfile.open(plain, "w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(files, arcname=".")
    with open(plain, "rb") as fh:
        stream = memoryview(fh.read())  # in memory before the clock starts
    os.unlink(plain)

    class Sink:
        size = 0

        def write(self, data) -> int:
            self.size += len(data)
            return len(data)

        def flush(self) -> None:
            pass

    def writer_only(name: str, writer, threads: int):
        def run() -> dict:
            sink = Sink()
            gz = writer(sink, level, threads)
            for start in range(0, len(stream), MiB):
                gz.write(stream[start:start + MiB])
            gz.close()
            return {"size": sink.size}

        return f"{name} (writer alone)", run, None

    runs = []
    for threads in [int(t) for t in args.threads.split(",")]:
        runs.append(writer_only(f"ours-{threads}t", ours_class, threads))
        runs.append(writer_only(f"isal-igzip_threaded-{threads}t", IsalThreadedWriter, threads))
    for threads in [int(t) for t in args.threads.split(",")]:
        runs.append(runner(f"ours-{threads}t", ours_class, threads))
        runs.append(runner(f"isal-igzip_threaded-{threads}t", IsalThreadedWriter, threads))
    print(f"{content / MiB:.0f} MiB in {sum(len(fs) for _, _, fs in os.walk(files))} files; ISA-L level {level}; "
          f"load average {load_average()}", flush=True)
    results = measure_interleaved(runs, repeats=args.repeats)

    # Same pack_directory, same tar stream: every writer's archive must hold exactly the same bytes.
    streams = {name: digest(os.path.join(out_dir, f"{name}.tar.gz")) for name, _, _ in runs if "alone" not in name}
    if len(set(streams.values())) != 1:
        raise AssertionError(f"the archives differ: {streams}")
    rows = [[r.name, f"{r.wall:.2f}", f"{r.cpu:.2f}", f"{content / MiB / r.wall:.0f}",
             f"{r.extra('size') / MiB:.1f}" if r.extra("size") else "-",
             f"{100 * (1 - r.extra('size') / content):.1f}%" if r.extra("size") else "-"] for r in results]
    table = markdown_table(["writer", "wall s (median)", "CPU s", "MiB/s", "archive MiB", "saved"], rows)
    note = (f"{content / MiB:.0f} MiB mixed set, {args.repeats} interleaved runs each, {os.cpu_count()} CPUs, load "
            f"average at the end {load_average()}")
    print(table + "\n" + note)
    save_results("gzip_writers", {"results": [r.to_dict() for r in results], "content_bytes": content,
                                  "note": note}, table + "\n\n" + note + "\n")


if __name__ == "__main__":
    main()

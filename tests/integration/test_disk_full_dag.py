"""A full workspace disk through whole training_job runs (dag.test, real `train` processes, MinIO), the workspace on a
real size-limited file system (a tmpfs: tests/small_disk.py): the failing stage's log has the one disk-full line,
nothing half-visible is left (no partial cache entry, no model under the output path, no open multipart upload), and
the next run, once space is freed, completes, downloading only what was not complete."""

from __future__ import annotations

import io
import os
import re
import tarfile
import textwrap

import pytest
from small_disk import small_disk  # noqa: F401  (the fixture)

from dag_runner import load_dag, run_dag

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]

MiB = 1024 * 1024

# Writes a 6 MiB model, and (when asked) junk in its working directory that leaves 1 MiB of the disk free: a training
# that filled the disk, so its model cannot be packed.
SCRIPT = textwrap.dedent('''
    import argparse, hashlib, os
    p = argparse.ArgumentParser(); p.add_argument("--fill", type=int, default=0); args = p.parse_args()
    data = b"".join(open(os.path.join(os.environ["TM_CHANNEL_TRAIN"], n), "rb").read()
                    for n in sorted(os.listdir(os.environ["TM_CHANNEL_TRAIN"])))
    weights = hashlib.sha256(data).digest() * (6 * 1024 * 1024 // 32)
    open(os.path.join(os.environ["TM_MODEL_DIR"], "weights.bin"), "wb").write(os.urandom(len(weights)))
    open(os.path.join(os.environ["TM_MODEL_DIR"], "data.sha256"), "w").write(hashlib.sha256(data).hexdigest())
    if args.fill:
        st = os.statvfs(".")
        with open("junk", "wb") as fh:
            os.posix_fallocate(fh.fileno(), 0, st.f_bavail * st.f_frsize - 1024 * 1024)
    print("trained", flush=True)
''')


def test_a_full_disk_fails_prefetch_then_packing_with_one_line_and_the_next_run_completes(
        small_disk, storage_connections, object_store, s3_proxy, monkeypatch, capfd):
    import hashlib

    disk = small_disk(32 * MiB)
    workspace = disk.path / "ws"
    monkeypatch.setenv("AIRFLOW__TRAINING__WORKSPACE", str(workspace))
    bucket = object_store.bucket()
    object_store.put(bucket, "code/train.py", SCRIPT.encode())
    object_store.put(bucket, "data/labels/labels.csv", b"cat,dog\n" * 1000)
    train = {f"part-{i}.bin": os.urandom(2 * MiB) for i in range(4)}
    for name, data in train.items():
        object_store.put(bucket, f"data/train/{name}", data)

    def conf(job: str, fill: int = 0) -> dict:
        return {"job_name": job, "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
                "hyperparameters": {"fill": fill},
                "inputs": {"labels": f"s3://{bucket}/data/labels/", "train": f"s3://{bucket}/data/train/"},
                "output_path": f"s3://{bucket}/models"}

    def gets(prefix: str) -> int:
        return sum(1 for r in s3_proxy.object_requests() if r["method"] == "GET" and f"/{bucket}/{prefix}" in r["path"])

    def leftovers() -> list[str]:
        cache = workspace / "cache"
        names = [p.name for p in cache.iterdir()] if cache.exists() else []
        return [n for n in names if n.startswith(("tmp-", "trash-"))] + [
            str(p) for p in workspace.rglob("*.part-*")]

    # 1. Another tenant's files leave 5 MiB: the 256 KiB labels channel is cached, the 8 MiB train channel cannot fit.
    disk.fill(leave=5 * MiB)
    state, states, _ = run_dag(load_dag("training_job.py", "training_job"), conf("disk-full-1"))
    out = capfd.readouterr().out
    assert state == "failed" and states["prefetch_data"] == "failed", states
    assert states["launch_training"] == "upstream_failed"
    line = next(x for x in out.splitlines() if "disk full: the data cache: prefetching" in x)
    assert f"prefetching s3://{bucket}/data/train/ (4 objects) needs 8.1 MiB in {workspace}/cache, " in line, line
    assert re.search(r", [45]\.[0-9] MiB free on that file system; free space there", line), line
    assert "retry the task" in line
    assert gets("data/train/") == 0 and gets("data/labels/") == 1  # failed before downloading: no byte of train
    assert leftovers() == []

    # 2. Space freed: train is downloaded, labels reused; the training fills the disk, so its model cannot be packed.
    disk.free()
    s3_proxy.reset()
    state, states, _ = run_dag(load_dag("training_job.py", "training_job"), conf("disk-full-2", fill=1))
    out = capfd.readouterr().out
    assert states["prefetch_data"] == "success" and states["launch_training"] == "success", states
    assert state == "failed" and states["upload_artifacts"] == "failed", states
    assert gets("data/labels/") == 0 and gets("data/train/") == 4
    model_dir = workspace / "jobs" / "disk-full-2" / "model"
    line = next(x for x in out.splitlines() if "disk full: packing model.tar.gz" in x)
    assert f"packing model.tar.gz (2 files of {model_dir}) needs 6." in line, line
    assert "nothing was published" in line
    # no model, not even a part of one: only the platform's owner records of the run (docs/security.md)
    assert [key for key in object_store.keys(bucket, "models/") if ".training-owner" not in key] == []
    assert object_store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert leftovers() == []

    # 3. The junk removed, the next run completes and downloads nothing: both channels' entries were complete.
    (workspace / "jobs" / "disk-full-2" / "code" / "junk").unlink()
    s3_proxy.reset()
    state, states, values = run_dag(load_dag("training_job.py", "training_job"), conf("disk-full-3"))
    assert state == "success", states
    assert gets("data/") == 0
    body = object_store.client.get_object(Bucket=bucket, Key="models/disk-full-3/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        digest = tar.extractfile("data.sha256").read().decode()
        assert len(tar.extractfile("weights.bin").read()) == 6 * MiB
    assert digest == hashlib.sha256(b"".join(train[n] for n in sorted(train))).hexdigest()

"""The training_job DAG against the real S3 server (MinIO) with what real stores hold: a channel of more than
1,000 objects (two LIST pages) with spaces and unicode in its keys, a code archive, a model and a checkpoint above
the multipart threshold (multipart uploads, multipart ETags, ranged downloads)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import textwrap

import pytest

from dag_runner import load_dag, run_dag

pytestmark = pytest.mark.usefixtures("airflow_db")

MiB = 1024 * 1024

SCRIPT = textwrap.dedent('''
    import hashlib, json, os
    channel = os.environ["TM_CHANNEL_TRAIN"]
    names = sorted(os.path.relpath(os.path.join(d, f), channel) for d, _, fs in os.walk(channel) for f in fs)
    blob = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "blob.bin"), "rb").read()
    ckpt_dir = os.environ["PAI_OUTPUT_CHECKPOINTS"]
    ckpt = os.path.join(ckpt_dir, "état 1", "weights.bin")
    resumed = os.path.exists(ckpt)
    previous = hashlib.md5(open(ckpt, "rb").read()).hexdigest() if resumed else None
    os.makedirs(os.path.dirname(ckpt), exist_ok=True)
    weights = os.urandom(7 * 1024 * 1024)
    open(ckpt, "wb").write(weights)
    open(os.path.join(os.environ["TM_MODEL_DIR"], "weights.bin"), "wb").write(weights)
    json.dump({"files": len(names), "first": names[0], "last": names[-1], "blob_md5": hashlib.md5(blob).hexdigest(),
               "resumed_md5": previous, "weights_md5": hashlib.md5(weights).hexdigest()},
              open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w"))
''')


def test_big_objects_odd_keys_and_many_keys_through_the_dag(storage_connections, object_store, many_objects, s3_proxy,
                                                           monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__TRAINING__MULTIPART_THRESHOLD", str(5 * MiB))
    monkeypatch.setenv("AIRFLOW__TRAINING__MULTIPART_CHUNKSIZE", str(5 * MiB))
    bucket = object_store.bucket()
    blob = os.urandom(6 * MiB)  # incompressible: the code archive stays above the multipart threshold
    code = io.BytesIO()
    with tarfile.open(fileobj=code, mode="w:gz") as tar:
        for name, data in (("train.py", SCRIPT.encode()), ("assets/blob.bin", blob)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "code.tar.gz").write_bytes(code.getvalue())
    from boto3.s3.transfer import TransferConfig

    object_store.client.upload_file(str(tmp_path / "code.tar.gz"), bucket, "code/source dir.tar.gz",
                                    Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    assert object_store.head(bucket, "code/source dir.tar.gz")["ETag"].strip('"').endswith("-2")
    files = many_objects.files
    conf = {
        "base_job_name": "storage",
        "source_dir": f"s3://{bucket}/code/source dir.tar.gz",
        "entry_point": "train.py",
        "inputs": {"train": many_objects.uri},
        "output_path": f"s3://{bucket}/models",
        "checkpoint_path": f"s3://{bucket}/checkpoints/run one/",
    }
    s3_proxy.reset()

    state, states, values = run_dag(load_dag("training_job.py", "training_job"), conf)

    assert state == "success", states
    pages = [r for r in s3_proxy.snapshot() if "list-type=2" in r["query"]]
    assert any("continuation-token=" in r["query"] for r in pages)  # the channel took a second LIST page
    model_key = values["publish_model"].split(f"{bucket}/", 1)[1]
    head = object_store.head(bucket, model_key)
    assert head["ETag"].strip('"').count("-") == 1  # model.tar.gz (> 5 MiB) went up as a multipart upload
    with tarfile.open(fileobj=io.BytesIO(object_store.get(bucket, model_key))) as tar:
        model = json.load(tar.extractfile("model.json"))
        weights = tar.extractfile("weights.bin").read()
    names = sorted(files)
    assert model["files"] == 1100 and (model["first"], model["last"]) == (names[0], names[-1])
    assert model["blob_md5"] == hashlib.md5(blob).hexdigest() and model["resumed_md5"] is None
    ckpt = object_store.get(bucket, "checkpoints/run one/état 1/weights.bin")
    assert hashlib.md5(ckpt).hexdigest() == model["weights_md5"] == hashlib.md5(weights).hexdigest()
    assert object_store.head(bucket, "checkpoints/run one/état 1/weights.bin")["ETag"].strip('"').endswith("-2")

    state, states, values = run_dag(load_dag("training_job.py", "training_job"), conf)  # resumes the checkpoint

    assert state == "success", states
    model_key = values["publish_model"].split(f"{bucket}/", 1)[1]
    with tarfile.open(fileobj=io.BytesIO(object_store.get(bucket, model_key))) as tar:
        second = json.load(tar.extractfile("model.json"))
    assert second["resumed_md5"] == hashlib.md5(ckpt).hexdigest()  # restored through a ranged download

"""The SDK's own transfers through a flaky store: code uploaded to code_location and a local-mode job's s3:// channel
downloaded through our fault proxy (tests/integration/fault_proxy.py) failing 30% of the requests to the real S3
server (MinIO). The proxy is ours because MinIO cannot shed load or cut connections on demand. It injects 503
SlowDown, connection resets and truncated bodies; not its 2 s stalls, which fail nothing (they are far below the read
timeout) and would only make the test slow. With boto3's defaults (3 attempts per request) about 3% of the requests
fail here, so each test below fails most runs without the SDK's retry policy (training_sdk/storage.py)."""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import textwrap
from pathlib import Path

import pytest

from counting_proxy import point_boto3_at
from fault_proxy import FaultProxy
from training_sdk import Estimator

RATE = 0.3
KINDS = ("slowdown", "reset", "truncate")
MIN_FAULTS = 10  # about 17 expected in the smaller test: a test whose proxy injected nothing proves nothing
SEEDS = (21, 22)  # reproducible draws: a failure names its seed


@pytest.fixture(scope="module")
def _proxy(s3_server):
    proxy = FaultProxy(s3_server.port)
    yield proxy
    proxy.close()


@pytest.fixture
def faults(_proxy, s3_server, monkeypatch, tmp_path) -> FaultProxy:
    """The fault proxy, injecting nothing until the test says so; boto3's AWS_* variables point the SDK at it."""
    point_boto3_at(monkeypatch, s3_server, _proxy.url, tmp_path)
    _proxy.set(rate=0.0)
    yield _proxy
    _proxy.set(rate=0.0)


def test_code_uploads_to_code_location_survive_faults(tmp_path, faults, object_store):
    # A notebook trying 40 variants of its code: each fit() packs and uploads its source_dir.
    bucket = object_store.bucket("code")
    sources = {}
    for i in range(40):
        src = tmp_path / f"src-{i}"
        (src / "pkg").mkdir(parents=True)
        (src / "train.py").write_text(f"print('variant {i}')\n")
        (src / "pkg" / "weights.bin").write_bytes(random.Random(i).randbytes(20_000))
        sources[i] = src
    faults.set(rate=RATE, seed=SEEDS[0], kinds=KINDS)

    uris = {i: Estimator(entry_point="train.py", source_dir=str(src), code_location=f"s3://{bucket}/code/")
            ._stage_code("training_job")[0] for i, src in sources.items()}

    print(f"\n[sdk faults] 40 code uploads: {faults.total_injected} faults in {faults.requests} requests")
    assert faults.total_injected >= MIN_FAULTS, dict(faults.injected)
    for i, uri in uris.items():
        key = uri.removeprefix(f"s3://{bucket}/")
        with tarfile.open(fileobj=io.BytesIO(object_store.get(bucket, key))) as tar:  # read directly, not proxied
            stored = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        assert stored == {"train.py": f"print('variant {i}')\n".encode(),
                          "pkg/weights.bin": (sources[i] / "pkg" / "weights.bin").read_bytes()}


COPY_CHANNEL = textwrap.dedent('''
    import hashlib, json, os
    root = os.environ["SM_CHANNEL_TRAIN"]
    seen = {os.path.relpath(os.path.join(d, f), root): hashlib.md5(open(os.path.join(d, f), "rb").read()).hexdigest()
            for d, _, files in os.walk(root, followlinks=True) for f in files}
    json.dump(seen, open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w"))
''')


def test_local_mode_downloads_an_s3_channel_through_faults(tmp_path, faults, object_store, monkeypatch):
    monkeypatch.setenv("TRAINING_LOCAL_WORKSPACE", str(tmp_path / "local-ws"))
    bucket = object_store.bucket("data")
    rng = random.Random(5)
    expected = {}
    for i in range(60):
        data = rng.randbytes(rng.randint(1_000, 50_000))
        object_store.put(bucket, f"train/part-{i:03d}.bin", data)
        expected[f"part-{i:03d}.bin"] = hashlib.md5(data).hexdigest()
    code = tmp_path / "src"
    code.mkdir()
    (code / "train.py").write_text(COPY_CHANNEL)
    est = Estimator(entry_point="train.py", source_dir=str(code), instance_type="local", layout="sagemaker",
                    output_path=str(tmp_path / "models"))
    faults.set(rate=RATE, seed=SEEDS[1], kinds=KINDS)

    job = est.fit({"train": f"s3://{bucket}/train/"})

    print(f"\n[sdk faults] 60-object channel: {faults.total_injected} faults in {faults.requests} requests")
    assert faults.total_injected >= MIN_FAULTS, dict(faults.injected)
    with tarfile.open(est.model_data()) as tar:
        seen = json.load(tar.extractfile("seen.json"))
    assert job.status == "Completed" and seen == expected
    assert Path(est.model_data()).is_file()

"""The training_job DAG through object-store faults (tests/integration/fault_proxy.py in front of MinIO): a whole run
at 10% faults publishes the model the script wrote, a transfer stage that fails on a fault that may pass is retried
by Airflow and the run completes, and a fault no retry can fix (403) fails the stage at once, without retries."""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import textwrap
from collections import Counter

import pytest

from dag_runner import load_dag, run_dag
from fault_proxy import FaultProxy

pytestmark = pytest.mark.usefixtures("airflow_db")

MiB = 1024 * 1024

SCRIPT = textwrap.dedent('''
    import hashlib, json, os
    channel = os.environ["TM_CHANNEL_TRAIN"]
    digests = {}
    for d, _, names in os.walk(channel):
        for name in names:
            path = os.path.join(d, name)
            digests[os.path.relpath(path, channel)] = hashlib.md5(open(path, "rb").read()).hexdigest()
    os.makedirs(os.environ["PAI_OUTPUT_CHECKPOINTS"], exist_ok=True)
    weights = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).digest() * (7 * 1024 * 1024 // 32)
    open(os.path.join(os.environ["PAI_OUTPUT_CHECKPOINTS"], "step-1.pt"), "wb").write(weights)
    open(os.path.join(os.environ["TM_MODEL_DIR"], "weights.bin"), "wb").write(weights)
    json.dump(digests, open(os.path.join(os.environ["TM_MODEL_DIR"], "channel.json"), "w"))
''')


@pytest.fixture
def faults(s3_server, set_aws_connection, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__MULTIPART_THRESHOLD", str(5 * MiB))
    monkeypatch.setenv("AIRFLOW__TRAINING__MULTIPART_CHUNKSIZE", str(5 * MiB))
    proxy = FaultProxy(s3_server.port)
    set_aws_connection("aws_default", s3_server.access_key, s3_server.secret_key, proxy.url)
    yield proxy
    proxy.close()


def setup_job(object_store) -> tuple[dict, dict[str, str]]:
    """A bucket with the code, a channel of 30 small objects and one of 12 MiB; the run's conf, channel MD5s."""
    from boto3.s3.transfer import TransferConfig

    bucket = object_store.bucket()
    object_store.put(bucket, "code/train.py", SCRIPT.encode())
    rng = random.Random(21)
    expected = {}
    for i in range(30):
        data = rng.randbytes(rng.randint(1000, 60_000))
        object_store.put(bucket, f"data/small/{i:03d}.bin", data)
        expected[f"small/{i:03d}.bin"] = hashlib.md5(data).hexdigest()
    data = rng.randbytes(12 * MiB)
    object_store.client.upload_fileobj(io.BytesIO(data), bucket, "data/large.bin",
                                       Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    expected["large.bin"] = hashlib.md5(data).hexdigest()
    conf = {
        "base_job_name": "faults",
        "source_dir": f"s3://{bucket}/code/",
        "entry_point": "train.py",
        "inputs": {"train": f"s3://{bucket}/data/"},
        "output_path": f"s3://{bucket}/models",
        "checkpoint_path": f"s3://{bucket}/checkpoints/",
    }
    return conf, expected


def try_numbers(run_id: str) -> dict[str, int]:
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: ti.try_number for ti in session.scalars(select(TaskInstance).where(
            TaskInstance.run_id == run_id))}


@pytest.mark.slow  # ~80 s here; the stages' transfers at 10% and 30% are in test_storage_faults.py (seconds each)
def test_a_run_through_ten_percent_faults_publishes_the_model_the_script_wrote(faults, object_store):
    conf, expected = setup_job(object_store)
    bucket = conf["output_path"].split("/")[2]
    faults.set(rate=0.1, seed=31)

    result = run_dag(load_dag("training_job.py", "training_job"), conf)

    state, states, values = result
    print(f"\n[faults] training_job run at 10%: {faults.total_injected} faults in {faults.requests} requests "
          f"{dict(sorted(faults.injected.items()))}")
    assert state == "success", states
    assert faults.total_injected >= 3
    model_key = values["publish_model"].split(f"{bucket}/", 1)[1]
    with tarfile.open(fileobj=io.BytesIO(object_store.get(bucket, model_key))) as tar:
        assert json.load(tar.extractfile("channel.json")) == expected  # the script saw every byte of its channel
        weights = tar.extractfile("weights.bin").read()
    assert object_store.get(bucket, "checkpoints/step-1.pt") == weights
    assert object_store.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_transient_failure_of_a_transfer_stage_is_retried_by_airflow(faults, object_store, s3_server,
                                                                      set_aws_connection):
    conf, expected = setup_job(object_store)
    # One attempt per request (the connection's config_kwargs), so the one throttled GET fails the stage.
    set_aws_connection("aws_default", s3_server.access_key, s3_server.secret_key, faults.url,
                       config_kwargs={"retries": {"mode": "standard", "max_attempts": 0}})
    throttled = []

    def choose(method: str, key: str, query: str):
        if method == "GET" and key == "data/small/007.bin" and not throttled:
            throttled.append(key)
            return "slowdown"
        return None

    faults.set(choose=choose)

    result = run_dag(load_dag("training_job.py", "training_job"), conf)

    state, states, _ = result
    assert faults.injected == {"slowdown": 1}
    assert state == "success", states
    tries = try_numbers(result.run_id)
    assert tries["prefetch_data"] == 2 and tries["stage_code"] == 1, tries


def test_an_access_denied_fails_the_stage_at_once_without_retries(faults, object_store):
    conf, _ = setup_job(object_store)
    asked: Counter[str] = Counter()

    def deny(method: str, key: str, query: str) -> str | None:
        if method == "GET" and key.startswith("data/small/"):  # one object per GET (the large one is ranges)
            asked[key] += 1
            return "denied"
        return None

    faults.set(choose=deny)
    result = run_dag(load_dag("training_job.py", "training_job"), conf)

    state, states, _ = result
    assert state == "failed" and states["prefetch_data"] == "failed", states
    assert try_numbers(result.run_id)["prefetch_data"] == 1  # not retried: the 403 would come back every time
    assert faults.injected["denied"] >= 1
    assert asked and max(asked.values()) == 1, asked  # nor by the client: each object was asked once

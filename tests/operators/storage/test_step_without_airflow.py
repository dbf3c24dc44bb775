"""A data-plane step's storage without Airflow (operators/step_process.py): in a process whose environment holds only
the step's marker, its connections (AIRFLOW_CONN_<ID>, JSON and URI form, as the storage Secret gives them) and its
[training] settings (AIRFLOW__TRAINING__<KEY>), the storage hook reads, lists, uploads and downloads on real MinIO
through both engines, the settings are the ones passed, a log line naming the connection's secret shows ***, and Airflow
is never imported."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import quote

from counting_proxy import aws_connection_json

from operators.step_process import STEP_ENV

ROOT = Path(__file__).resolve().parents[3]

STEP = textwrap.dedent("""
    import json, logging, os, sys, time
    started = time.monotonic()
    from operators import log_masking
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s")
    log_masking.mask_handlers()
    from operators.settings import training_settings
    from operators.storage.hook import ObjectStorageHook
    import operators.storage.obstore.store as obstore_store

    bucket, work, secret = sys.argv[1:4]
    settings = training_settings()
    said = {"concurrency": settings.transfer_concurrency, "workspace": settings.workspace}
    for engine, connections in (("obstore", {}), ("botocore", {"s3": "uri_store"})):
        if engine == "botocore":  # as tests/operators/storage/botocore do: every bucket on the botocore engine
            obstore_store.obstore_settings = lambda remote, bucket: None
        hook = ObjectStorageHook(connections=connections, settings=settings)
        source = os.path.join(work, engine, "up")
        os.makedirs(os.path.join(source, "sub"))
        for name, data in (("a.txt", b"alpha " * 1000), ("sub/b.bin", os.urandom(300_000))):
            with open(os.path.join(source, name), "wb") as handle:
                handle.write(data)
        prefix = f"s3://{bucket}/{engine}/"
        hook.upload_dir(source, prefix)
        listed = sorted(o.relative_path for o in hook.list_objects(prefix))
        down = os.path.join(work, engine, "down")
        hook.download(prefix, down)
        same = all(open(os.path.join(source, n), "rb").read() == open(os.path.join(down, n), "rb").read()
                   for n in ("a.txt", "sub/b.bin"))
        hook.write_bytes(prefix + "note.txt", b"hello")
        remote = hook.store(prefix).remote
        said[engine] = {"listed": listed, "same": same, "read": hook.read_bytes(prefix + "note.txt").decode(),
                        "obstore": remote.engine_choice.get(bucket) is not None}
    logging.getLogger("operators.storage.hook").info("a line that names %s", secret)
    said["airflow"] = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
    said["seconds"] = time.monotonic() - started
    print("RESULT " + json.dumps(said))
""")


def step_environment(s3_server, endpoint: str, tmp_path: Path) -> dict[str, str]:
    key, secret = s3_server.access_key, s3_server.secret_key
    uri = (f"aws://{quote(key, safe='')}:{quote(secret, safe='')}@/?endpoint_url={quote(endpoint, safe='')}"
           "&region_name=us-east-1&addressing_style=path")
    return {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")]),
        STEP_ENV: json.dumps({"task_id": "prefetch_data"}),
        "AIRFLOW_CONN_AWS_DEFAULT": aws_connection_json(key, secret, endpoint, "us-east-1"),
        "AIRFLOW_CONN_URI_STORE": uri,
        "AIRFLOW__TRAINING__WORKSPACE": str(tmp_path / "workspace"),
        "AIRFLOW__TRAINING__TRANSFER_CONCURRENCY": "3",
    }


def test_a_step_moves_bytes_on_both_engines_without_importing_airflow(s3_server, s3_proxy, object_store, tmp_path):
    bucket = object_store.bucket()
    env = step_environment(s3_server, s3_proxy.url, tmp_path)
    done = subprocess.run([sys.executable, "-c", STEP, bucket, str(tmp_path / "work"), s3_server.secret_key],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    said = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert said["airflow"] == []
    assert said["concurrency"] == 3 and said["workspace"] == str(tmp_path / "workspace")
    for engine in ("obstore", "botocore"):
        assert said[engine] == {"listed": ["a.txt", "sub/b.bin"], "same": True, "read": "hello",
                                "obstore": engine == "obstore"}, engine
    assert object_store.keys(bucket, "botocore/") == ["botocore/a.txt", "botocore/note.txt", "botocore/sub/b.bin"]
    assert "a line that names ***" in done.stdout
    assert s3_server.secret_key not in done.stdout + done.stderr


# What a step's stages do below their operators (operators/stages/: stage_code, prefetch_data, restore,
# upload_artifacts), in a process where importing Airflow fails: a lazy import left on the step's path would raise here.
WORK = textwrap.dedent("""
    import json, logging, os, sys

    class NoAirflow:
        def find_spec(self, name, path=None, target=None):
            if name == "airflow" or name.startswith("airflow."):
                raise ImportError(f"a step imported {name}")

    sys.meta_path.insert(0, NoAirflow())
    from operators.cache.data_cache import DataCacheHook
    from operators.jobspec.ownership import load_ownership
    from operators.settings import training_settings
    from operators.state.owner_records import OwnerRecord, check_spec_locations, record_job_area
    from operators.state.retention import collect_garbage
    from operators.staging.code import stage_code
    from operators.storage.hook import ObjectStorageHook

    bucket, work = sys.argv[1:3]
    settings = training_settings()
    storage = ObjectStorageHook(settings=settings)
    storage.write_bytes(f"s3://{bucket}/code/train.py", b"print(1)")
    storage.write_bytes(f"s3://{bucket}/data/x.csv", b"1,2")
    spec = {"job_name": "j-1", "output_path": f"s3://{bucket}/out", "inputs": {"train": f"s3://{bucket}/data/"},
            "source_dir": f"s3://{bucket}/code/"}
    record = OwnerRecord("ann", "training_job", "j", "job", "j-1", "r1")
    check_spec_locations(storage, load_ownership(), spec, "ann", record, logging.getLogger("x"))
    staged = stage_code(storage, spec["source_dir"], os.path.join(work, "code"))
    cache = DataCacheHook(settings.cache_dir, storage, max_bytes=settings.cache_max_bytes)
    collect_garbage(settings.jobs_dir, cache, settings.retention_days)
    entry = cache.prefetch(spec["inputs"]["train"], user="j-1")
    os.makedirs(os.path.join(work, "model"))
    with open(os.path.join(work, "model", "w.bin"), "wb") as handle:
        handle.write(b"weights")
    storage.upload_packed_directory(os.path.join(work, "model"), f"s3://{bucket}/out/j-1/output/model.tar.gz",
                                    os.path.join(work, "model.tar.gz"), within=work)
    record_job_area(storage, spec["output_path"], "j-1", record)
    print("RESULT " + json.dumps({"files": staged.files, "entry": entry.files,
                                  "airflow": [m for m in sys.modules if m.split(".")[0] == "airflow"]}))
""")


def test_the_stages_work_below_their_operators_reaches_no_airflow(s3_server, s3_proxy, object_store, tmp_path):
    bucket = object_store.bucket()
    env = step_environment(s3_server, s3_proxy.url, tmp_path)
    env["AIRFLOW__TRAINING__OUTPUT_ROOTS"] = ""
    done = subprocess.run([sys.executable, "-c", WORK, bucket, str(tmp_path / "work")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.split("RESULT ", 1)[1]) == {"files": 1, "entry": 1, "airflow": []}
    assert "out/j-1/output/model.tar.gz" in object_store.keys(bucket, "out/")

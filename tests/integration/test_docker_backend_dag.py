"""The training_job DAG with "backend": "docker" on the real engine (real Airflow, metadata DB, the loopback S3
store), training in containers of the images `make images` built: through `airflow dags test training_job` (the
command, in a child process) and through dag.test(), the function that command runs (in-process, to read XCom)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dag_runner import (
    DDP_SCRIPT,
    HOSTILE_SCRIPT,
    assert_nothing_leaked,
    assert_published_without_links,
    hostile_world,
    load_dag,
    model_json,
    put_code,
    run_dag,
)
from docker_support import TORCH_IMAGE, TRAINING_IMAGE, engine, require_image
from operators.lineage.record import LineageRecord

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]  # `dags test` may take 600 s


@pytest.fixture
def training_dag():
    return load_dag("training_job.py", "training_job")


@pytest.fixture
def docker_engine():
    client = engine()
    require_image(client, TRAINING_IMAGE)
    return client


def job_leftovers(client, job_name: str) -> list:
    from operators.launch.names import JOB_LABEL, resource_name

    return client.containers(all=True, filters={"label": f"{JOB_LABEL}={resource_name(job_name)}"})


CHANNEL_SCRIPT = textwrap.dedent('''
    import argparse, json, os, socket
    p = argparse.ArgumentParser(); p.add_argument("--epochs", type=int)
    args = p.parse_args()
    rows = open(os.path.join(os.environ["TM_CHANNEL_TRAIN"], "rows.csv")).read().split()
    for epoch in range(args.epochs):
        print(f"epoch={epoch} loss={1.0 / (epoch + 1):.3f}", flush=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"rows": len(rows), "uid": os.getuid(), "host": os.environ["TM_CURRENT_HOST"],
                   "hostname": socket.gethostname(), "cwd": os.getcwd()}, f)
''')


def test_one_host_with_an_s3_channel(docker_engine, training_dag, storage_connections, object_store):
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": CHANNEL_SCRIPT})
    object_store.put(bucket, "data/train/rows.csv", b"1\n2\n3\n4\n")
    conf = {
        "job_name": "docker-s3",
        "backend": "docker",
        "source_dir": f"s3://{bucket}/code/",
        "entry_point": "train.py",
        "hyperparameters": {"epochs": 2},
        "inputs": {"train": f"s3://{bucket}/data/train/"},
        "output_path": f"s3://{bucket}/models",
        "resources": {"cpu": 1, "memory": "512Mi"},
        "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
    }
    state, states, values = run_dag(training_dag, conf)
    assert state == "success", states
    model = model_json(object_store, bucket, "models/docker-s3/output/model.tar.gz")
    assert model == {"rows": 4, "uid": 1000, "host": "docker-s3-0", "hostname": "docker-s3-0", "cwd": "/opt/ml/code"}
    assert values["launch_training"]["metrics"] == {"loss": pytest.approx(0.5)}
    assert job_leftovers(docker_engine, "docker-s3") == []
    # The image the containers ran, published beside the model: what `docker image inspect` says its id is.
    image_id = subprocess.run(["docker", "image", "inspect", TRAINING_IMAGE, "--format", "{{.Id}}"], check=True,
                              capture_output=True, text=True).stdout.strip()
    lineage = LineageRecord.from_json(object_store.get(bucket, "models/docker-s3/output/lineage.json"))
    assert (lineage.image.backend, lineage.image.name, lineage.image.digest) == ("docker", TRAINING_IMAGE, image_id)
    assert image_id.startswith("sha256:") and values["launch_training"]["image_digest"] == image_id


@pytest.mark.slow
def test_two_host_pytorch_ddp_all_reduce_in_the_torch_image(
    docker_engine, training_dag, storage_connections, object_store
):
    require_image(docker_engine, TORCH_IMAGE)
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": DDP_SCRIPT})
    conf = {
        "job_name": "docker-ddp",
        "backend": "docker",
        "image_uri": TORCH_IMAGE,
        "source_dir": f"s3://{bucket}/code/",
        "entry_point": "train.py",
        "instance_count": 2,
        "distribution": "pytorch",
        "resources": {"cpu": 1, "memory": "2Gi"},
        "output_path": f"s3://{bucket}/models",
        "metric_definitions": [{"Name": "allreduce", "Regex": "allreduce=([0-9.]+)"}],
        "max_run_seconds": 300,
    }
    state, states, values = run_dag(training_dag, conf)
    assert state == "success", states
    model = model_json(object_store, bucket, "models/docker-ddp/output/model.tar.gz")
    hosts = ["docker-ddp-0", "docker-ddp-1"]
    assert model == {"sum": 3.0, "world": 2, "master": hosts[0], "hosts": hosts}
    assert values["launch_training"]["metrics"] == {"allreduce": 3.0}
    assert job_leftovers(docker_engine, "docker-ddp") == []


def test_a_failing_script_fails_airflow_dags_test_with_its_reason(docker_engine, storage_connections, object_store):
    """Through the `airflow dags test` command itself (a child process; it exits 1 on a failed run)."""
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": "import sys\nprint('loading', flush=True)\n"
                                                "sys.exit('ValueError: column label has NaN values')\n"})
    conf = {"job_name": "docker-failing", "backend": "docker", "source_dir": f"s3://{bucket}/code/",
            "entry_point": "train.py", "output_path": f"s3://{bucket}/models"}
    run = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", "training_job", "--conf", json.dumps(conf)],
        env=os.environ.copy(), capture_output=True, text=True, timeout=600,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    assert "training job docker-failing failed (user_error)" in out and "exit code 1" in out
    assert "[docker] started job docker-failing: docker-failing-0" in out and "user 1000:1000" in out
    failure = object_store.get(bucket, "models/docker-failing/output/failure").decode()
    assert "column label has NaN values" in failure
    assert "models/docker-failing/output/model.tar.gz" not in object_store.keys(bucket, "models/docker-failing/")
    assert job_leftovers(docker_engine, "docker-failing") == []


def test_links_a_container_leaves_in_the_job_root_leak_nothing_and_overwrite_nothing(
        docker_engine, training_dag, storage_connections, object_store, capfd, caplog, tmp_path):
    """Issue 23 on the Docker backend: the worker reads the bind-mounted job root after the container wrote it."""
    world = hostile_world(tmp_path)
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": HOSTILE_SCRIPT})
    conf = {"job_name": "docker-hostile", "backend": "docker", "source_dir": f"s3://{bucket}/code/",
            "entry_point": "train.py", "hyperparameters": world["hyperparameters"],
            "output_path": f"s3://{bucket}/models", "checkpoint_path": f"s3://{bucket}/ckpt/",
            "resources": {"cpu": 1, "memory": "512Mi"},
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    state, states, values = run_dag(training_dag, conf)
    sys.stdout.flush()
    captured = capfd.readouterr()
    log = captured.out + captured.err + caplog.text  # the task log: printed, and as records
    assert state == "success", states
    assert_published_without_links(object_store, bucket, "docker-hostile", log)
    blobs = {key: object_store.get(bucket, key) for key in object_store.keys(bucket)}
    assert_nothing_leaked(world, {**blobs, "xcom": json.dumps(values).encode(), "log": log.encode()})
    assert job_leftovers(docker_engine, "docker-hostile") == []


# ---- a team's own training image (docs/docker.md, "Your own training image") ---------------------------------------
# The base is not the project's: no registry is reachable here, so a stand-in for python:3.9-slim is built locally, a
# Debian root file system with its Python 3.11 removed and CPython 3.9 (pyenv's, on this machine) in /usr/local.
FOREIGN_BASE = "training-foreign-python:3.9"
_FOREIGN_LABEL = "org.training-jobs.inputs"
_FOREIGN_DOCKERFILE = """\
FROM {rootfs}
RUN rm -rf /usr/bin/python* /usr/bin/pip* /usr/lib/python3* /usr/local/lib/python3* /usr/local/bin/*
ADD python.tar /usr/local/
RUN ldconfig && ln -sf python3.9 /usr/local/bin/python3 && ln -sf python3.9 /usr/local/bin/python \\
 && python3 --version && python3 -m pip --version && ! test -e /usr/bin/python3
"""


def _python39_prefix() -> Path | None:
    for python in sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9")):
        if subprocess.run([str(python), "-c", "import ssl, venv, ensurepip"], capture_output=True).returncode == 0:
            return python.parents[1]
    return None


def _build(tag: str, context: Path, dockerfile: str, key: str = "") -> None:
    (context / "Dockerfile").write_text(dockerfile)
    labels = ["--label", f"{_FOREIGN_LABEL}={key}"] if key else []
    result = subprocess.run(["docker", "build", "-q", "--force-rm", *labels, "-t", tag, str(context)],
                            capture_output=True, text=True, timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    assert result.returncode == 0, f"docker build {tag}: {result.stdout[-2000:]}{result.stderr[-2000:]}"


def _foreign_base(client, tmp_path: Path) -> str:
    import docker.errors

    prefix = _python39_prefix()
    if prefix is None:
        pytest.skip("no CPython 3.9 on this machine (~/.pyenv/versions/3.9*) for the python:3.9-slim stand-in")
    rootfs = None
    for candidate in ("training-debian:bookworm", "python:3.11-slim"):  # whichever `make images` based its images on
        try:
            rootfs = client.inspect_image(candidate)["Id"]
            break
        except docker.errors.ImageNotFound:
            continue
    if rootfs is None:
        pytest.fail("neither training-debian:bookworm nor python:3.11-slim is on the engine; run `make images`")
    dockerfile = _FOREIGN_DOCKERFILE.format(rootfs=rootfs)
    key = hashlib.sha256(f"{dockerfile}{prefix}".encode()).hexdigest()[:16]
    try:
        if client.inspect_image(FOREIGN_BASE)["Config"]["Labels"].get(_FOREIGN_LABEL) == key:
            return FOREIGN_BASE
    except docker.errors.ImageNotFound:
        pass
    context = tmp_path / "foreign-base"
    context.mkdir()
    # Not pyenv's site-packages .pth files of this machine, nor its test suite: a python:3.9-slim has neither.
    subprocess.run(["tar", "-C", str(prefix), "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                    "--numeric-owner", "--exclude=lib/python3.9/test", "--exclude=__pycache__",
                    "--exclude=lib/python3.9/site-packages/*.pth", "-cf", str(context / "python.tar"),
                    "bin", "include", "lib"], check=True, timeout=300)
    _build(FOREIGN_BASE, context, dockerfile, key)
    return FOREIGN_BASE


def _documented_lines() -> str:
    """The Dockerfile lines docs/docker.md tells a team to add (its one ```dockerfile block after the marker)."""
    text = (REPO / "docs" / "docker.md").read_text()
    after = text.split("builds an image with exactly the lines of this block -->\n```dockerfile\n", 1)[1]
    return after.split("```", 1)[0]


def test_a_teams_own_image_with_the_documented_lines_runs_a_job(
        docker_engine, training_dag, storage_connections, object_store, tmp_path):
    """Issue 49: the runtime in any image. The team's image is its base (Python 3.9, root, nothing of the project)
    plus the lines of docs/docker.md and the wheel `make dist` builds; a training job runs on it to a published
    model."""
    base = _foreign_base(docker_engine, tmp_path)
    context = tmp_path / "team-image"
    context.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(context), str(_runtime_copy(tmp_path))],
                   check=True, timeout=300)
    assert [w.name.split("-")[0] for w in context.glob("*.whl")] == ["airflow_training_jobs_runtime"]
    image = "training-team-image:py39"
    _build(image, context, f"FROM {base}\n{_documented_lines()}")
    put_code(object_store, bucket := object_store.bucket(), {"train.py": TEAM_SCRIPT})
    conf = {"job_name": "team-image", "backend": "docker", "image_uri": image, "source_dir": f"s3://{bucket}/code/",
            "entry_point": "train.py", "output_path": f"s3://{bucket}/models", "resources": {"cpu": 1}}
    state, states, _ = run_dag(training_dag, conf)
    assert state == "success", states
    model = model_json(object_store, bucket, "models/team-image/output/model.tar.gz")
    assert model["python"].startswith("3.9.") and model["executable"].startswith("/usr/local/bin/")
    assert model["uid"] == 1000 and model["host"] == "team-image-0"
    assert job_leftovers(docker_engine, "team-image") == []


TEAM_SCRIPT = textwrap.dedent('''
    import json, os, platform, sys
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"python": platform.python_version(), "executable": sys.executable, "uid": os.getuid(),
                   "host": os.environ["TM_CURRENT_HOST"]}, f)
''')


def _runtime_copy(tmp_path: Path) -> Path:
    """runtime/ copied, so the wheel build writes its build/ and metadata outside the checkout."""
    copy = tmp_path / "runtime-source"
    shutil.copytree(REPO / "runtime", copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    return copy

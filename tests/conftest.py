"""Shared fixtures. Airflow reads its config at import time, so AIRFLOW_HOME is set here, before any test imports it."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-home-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
shutil.copy(REPO / "airflow.cfg", _AIRFLOW_HOME / "airflow.cfg")
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["AIRFLOW__TRAINING__WORKSPACE"] = str(_AIRFLOW_HOME / "workspace")
# Tests stage from and write to pytest's temporary directories (Airflow's own files there are refused regardless),
# and the shipped examples (the retraining config's source_dir) as the shipped airflow.cfg allows.
os.environ.setdefault("AIRFLOW__TRAINING__LOCAL_ROOTS",
                      f"{os.path.realpath(tempfile.gettempdir())},{REPO / 'examples'}")
os.environ.setdefault("NO_PROXY", "*")
for _var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
    os.environ.pop(_var, None)


# xdist: a module per worker, the real node's modules on one; timed-out tests fail without ending their worker.
from xdist_scheduling import (  # noqa: E402, F401
    pytest_keyboard_interrupt, pytest_runtest_logreport, pytest_runtest_logstart, pytest_xdist_make_scheduler)
from timeout_guard import (  # noqa: E402, F401
    pytest_runtest_makereport, pytest_runtest_teardown, pytest_timeout_cancel_timer, pytest_timeout_set_timer,
    pytest_unconfigure)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The differential tests' figure, gathered from the workers (tests/runtime/conftest.py prints it)."""
    results = getattr(node, "workeroutput", {}).get("peer_scoreboard")
    if results:
        import peer_runtimes

        for peer, (matched, total) in results.items():
            peer_runtimes.SCOREBOARD.add(peer, matched, total)


def pytest_terminal_summary(terminalreporter):
    """The differential tests' figure: checks matched / total per peer runtime."""
    peer_runtimes = sys.modules.get("peer_runtimes")
    if peer_runtimes is None or not peer_runtimes.SCOREBOARD.results:
        return
    terminalreporter.section("differential tests against the real runtimes")
    for line in peer_runtimes.SCOREBOARD.lines():
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """A migrated metadata DB (SQLite in the temporary AIRFLOW_HOME), once per session."""
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
    )
    return airflow_home


# --- object storage fixtures ---
# A real S3 server on loopback: MinIO (tests/minio_server.py; built by `make minio`), single node, one temporary
# drive, checking every request's signature (wrong credentials are refused as on any real store), behind small
# counting reverse proxies (one per "provider" endpoint) that record every request and the bytes they return, and
# can slow responses down or corrupt them. Nothing in boto3 is patched: the code under test talks HTTP.
# moto's server is kept for the one thing MinIO refuses to do (store keys with '..' segments): `moto_s3`.

import uuid as _uuid
from dataclasses import dataclass as _dataclass

from counting_proxy import CountingProxy, _free_port, _wait_for_port, aws_connection_json
from minio_server import MinioServer


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> MinioServer:
    """The session's MinIO server (url, port, access_key, secret_key, process, client())."""
    # Import Airflow (which configures its log handlers on sys.stdout) here, under the session-wide capture,
    # not inside a test using capfd/capsys whose stream is closed afterwards ("I/O operation on closed file").
    import airflow.providers.amazon.aws.hooks.base_aws  # noqa: F401

    server = MinioServer(log_path=str(tmp_path_factory.mktemp("minio") / "minio.log"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_server(s3_server) -> MinioServer:
    """The old name of `s3_server`, kept for tests written against it: it is the MinIO server now."""
    return s3_server


@_dataclass
class MotoS3:
    url: str
    process: subprocess.Popen


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory) -> MotoS3:
    """`python -m moto.server` on a free port, without authentication: only for what MinIO refuses to store."""
    port = _free_port()
    log_file = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for_port(port, proc)
        yield MotoS3(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log_file.close()


@pytest.fixture(scope="session")
def _s3_proxy_session(s3_server) -> CountingProxy:
    proxy = CountingProxy(s3_server.port, "aws")
    yield proxy
    proxy.close()


@pytest.fixture(scope="session")
def _cos_proxy_session(s3_server) -> CountingProxy:
    proxy = CountingProxy(s3_server.port, "cos")
    yield proxy
    proxy.close()


@pytest.fixture
def s3_proxy(_s3_proxy_session) -> CountingProxy:
    """The aws_default endpoint's proxy, with its request log cleared for this test."""
    _s3_proxy_session.reset()
    yield _s3_proxy_session
    _s3_proxy_session.reset()


@pytest.fixture
def cos_proxy(_cos_proxy_session) -> CountingProxy:
    """The COS endpoint's proxy (a different host:port than aws_default), log cleared for this test."""
    _cos_proxy_session.reset()
    yield _cos_proxy_session
    _cos_proxy_session.reset()


@pytest.fixture(scope="session")
def s3_endpoint(_s3_proxy_session) -> str:
    return _s3_proxy_session.url


@pytest.fixture(scope="session")
def cos_endpoint(_cos_proxy_session) -> str:
    return _cos_proxy_session.url



@pytest.fixture
def storage_connections(monkeypatch, s3_server, s3_proxy, cos_proxy) -> dict[str, str]:
    """AIRFLOW_CONN_AWS_DEFAULT, AIRFLOW_CONN_COS_DEFAULT and AIRFLOW_CONN_MY_COS pointing at the proxies.

    Returns conn id -> endpoint URL. Child processes started by the test inherit the variables.
    """
    key, secret = s3_server.access_key, s3_server.secret_key
    connections = {
        "aws_default": (s3_proxy.url, "us-east-1"),
        "cos_default": (cos_proxy.url, "ap-guangzhou"),
        "my_cos": (cos_proxy.url, "ap-shanghai"),
    }
    for conn_id, (endpoint, region) in connections.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", aws_connection_json(key, secret, endpoint, region))
    return {conn_id: endpoint for conn_id, (endpoint, _) in connections.items()}


@pytest.fixture
def set_aws_connection(monkeypatch):
    """set_aws_connection(conn_id, access_key, secret_key, endpoint, region="us-east-1", **extra): an env connection."""

    def set_connection(conn_id: str, access_key: str, secret_key: str, endpoint: str, region: str = "us-east-1", **extra):
        env_name = f"AIRFLOW_CONN_{conn_id.upper()}"
        monkeypatch.setenv(env_name, aws_connection_json(access_key, secret_key, endpoint, region, **extra))

    return set_connection


class ObjectStore:
    """Test helper: unique buckets and objects on the S3 server (direct, uncounted)."""

    def __init__(self, server: MinioServer) -> None:
        self.server = server
        self.client = server.client()

    def bucket(self, prefix: str = "bkt") -> str:
        name = f"{prefix}-{_uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, bucket: str, key: str) -> bytes:
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def head(self, bucket: str, key: str) -> dict:
        return self.client.head_object(Bucket=bucket, Key=key)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []) or [])


@pytest.fixture
def object_store(s3_server) -> ObjectStore:
    return ObjectStore(s3_server)


@_dataclass(frozen=True)
class ManyObjects:
    """A prefix holding more objects than one LIST page (1,000) returns, with spaces and unicode in the keys."""

    bucket: str
    prefix: str
    files: dict  # relative path -> bytes

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@pytest.fixture(scope="session")
def many_objects(s3_server) -> ManyObjects:
    """1,100 small objects under one prefix, put once per session (read-only for the tests that use it)."""
    from concurrent.futures import ThreadPoolExecutor

    files = {f"shard {i // 250}/ex_{i:04d} – ü.txt": f"row {i}\n".encode() for i in range(1100)}
    bucket, prefix = f"many-{_uuid.uuid4().hex[:12]}", "data/ñ train/"
    client = s3_server.client(max_pool_connections=16)
    client.create_bucket(Bucket=bucket)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=prefix + kv[0], Body=kv[1]), files.items()))
    return ManyObjects(bucket, prefix, files)


# --- end object storage fixtures ---


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """The suite's real `mlflow server` (tests/mlflow_server.py), one per module that asks for it."""
    # lazy: the MLflow server's helper, only for the modules that track
    from mlflow_server import MlflowServer

    server = MlflowServer(log_path=str(tmp_path_factory.mktemp("mlflow") / "server.log"))
    server.start()
    yield server
    server.stop()

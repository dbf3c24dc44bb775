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


# `make test` runs the tests outside tests/integration on xdist workers (-n N): a module's tests stay on one worker (its module fixtures start
# once), and every module that needs the real node runs on that one worker too (one real node at a time: its image
# store holds the multi-GB training images). Other session fixtures (MinIO, kwok clusters, PostgreSQL, Airflow) start
# per worker, on free ports and in private directories. xdist's own --dist loadgroup can't do this under pytest 9
# (it renames items through an attribute pytest 9 no longer reads), hence a scheduler of ours.
_REAL_NODE_FIXTURES = ("real_cluster", "real_namespace", "real_admin")


def _real_node_modules() -> set[str]:
    modules = set()
    for path in (REPO / "tests").rglob("test_*.py"):
        text = path.read_text(errors="replace")
        if "real_node" in path.name or any(name in text for name in _REAL_NODE_FIXTURES):
            modules.add(path.relative_to(REPO).as_posix())
    return modules


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    real_node = _real_node_modules()

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return "real-node" if module in real_node else module

    return ModuleScheduling(config, log)


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

import json as _json
import socket as _socket
import threading as _threading
import time as _time
import uuid as _uuid
from dataclasses import dataclass as _dataclass
from http.client import HTTPConnection as _HTTPConnection
from http.server import BaseHTTPRequestHandler as _BaseHandler
from http.server import ThreadingHTTPServer as _ThreadingHTTPServer

from minio_server import MinioServer

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}


def _free_port() -> int:
    with _socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = _time.monotonic() + timeout
    while _time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        try:
            with _socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            _time.sleep(0.1)
    raise RuntimeError(f"moto server did not listen on port {port} within {timeout}s")


class CountingProxy:
    """Loopback reverse proxy in front of the S3 server.

    `requests` holds one dict per request: method, path, query, status, bytes_in (request body) and
    bytes_out (response body bytes actually sent). `throttle_bytes_per_s` slows every response body
    down (per response) so a test can interrupt a transfer half-way or make it long enough to log
    progress. `corrupt_object_bodies` flips the first byte of every object GET response body (a
    transfer corrupted on the way, which only an MD5 check notices). `fail_requests(status, code, count)` answers
    the next `count` requests (-1: all) itself with that S3 error (a store shedding load with 503 SlowDown, say:
    the real server cannot be made to do that on demand).
    """

    def __init__(self, upstream_port: int, name: str) -> None:
        self.name = name
        self.upstream_port = upstream_port
        self.requests: list[dict] = []
        self.throttle_bytes_per_s = 0
        self.corrupt_object_bodies = False
        self._failure: tuple[int, str, int] | None = None  # (status, code, how many more; -1 = all)
        self._lock = _threading.Lock()
        proxy = self

        class Handler(_BaseHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _read_body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _forward(self) -> None:
                body = self._read_body()
                if proxy._take_failure(self):
                    return
                upstream = _HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                # The Host header is forwarded unchanged: it is part of the SigV4 signature.
                upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for key, value in self.headers.items():
                    if key.lower() not in _HOP_HEADERS and key.lower() != "content-length":
                        upstream.putheader(key, value)
                if body or self.command in ("PUT", "POST"):
                    upstream.putheader("Content-Length", str(len(body)))
                upstream.endheaders(body or None)
                response = upstream.getresponse()
                record = {
                    "time": _time.time(),
                    "method": self.command,
                    "path": self.path.split("?", 1)[0],
                    "query": self.path.split("?", 1)[1] if "?" in self.path else "",
                    "status": response.status,
                    "bytes_in": len(body),
                    "bytes_out": 0,
                }
                with proxy._lock:
                    proxy.requests.append(record)
                self.send_response_only(response.status, response.reason)
                headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS]
                length = response.getheader("Content-Length")
                if self.command == "HEAD" or response.status in (204, 304):
                    for key, value in headers:
                        self.send_header(key, value)
                    self.end_headers()
                    upstream.close()
                    return
                if length is None:
                    data = response.read()
                    headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                    headers.append(("Content-Length", str(len(data))))
                    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
                else:
                    chunks = iter(lambda: response.read(65536), b"")
                for key, value in headers:
                    self.send_header(key, value)
                self.end_headers()
                corrupt = (
                    proxy.corrupt_object_bodies
                    and self.command == "GET"
                    and response.status in (200, 206)
                    and record["path"].strip("/").count("/") >= 1
                )
                try:
                    for chunk in chunks:
                        if corrupt and chunk:
                            chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                            corrupt = False
                        self.wfile.write(chunk)
                        record["bytes_out"] += len(chunk)
                        if proxy.throttle_bytes_per_s:
                            _time.sleep(len(chunk) / proxy.throttle_bytes_per_s)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = _ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = _threading.Thread(target=self._server.serve_forever, name=f"proxy-{name}", daemon=True)
        self._thread.start()

    def fail_requests(self, status: int, code: str, count: int = -1) -> None:
        self._failure = (status, code, count)

    def _take_failure(self, handler) -> bool:
        """Answer this request with the injected error, if one is set (and count it down)."""
        with self._lock:
            if self._failure is None:
                return False
            status, code, count = self._failure
            if count == 0:
                return False
            self._failure = (status, code, count - 1 if count > 0 else count)
            self.requests.append({"method": handler.command, "path": handler.path.split("?", 1)[0],
                                  "query": handler.path.split("?", 1)[1] if "?" in handler.path else "",
                                  "status": status, "bytes_in": 0, "bytes_out": 0})
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>Please reduce your request rate.</Message></Error>").encode()
        handler.send_response_only(status)
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)
        return True

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
        self.throttle_bytes_per_s = 0
        self.corrupt_object_bodies = False
        self._failure = None

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.requests)

    def object_requests(self) -> list[dict]:
        """Requests that read or write object bytes (everything but listings and bucket calls)."""
        return [r for r in self.snapshot() if r["path"].strip("/").count("/") >= 1]

    def bytes_out(self, method: str | None = None) -> int:
        return sum(r["bytes_out"] for r in self.snapshot() if method is None or r["method"] == method)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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


def aws_connection_json(access_key: str, secret_key: str, endpoint: str, region: str, **extra) -> str:
    """An Airflow connection of type aws in the JSON form AIRFLOW_CONN_<ID> accepts."""
    return _json.dumps(
        {
            "conn_type": "aws",
            "login": access_key,
            "password": secret_key,
            "extra": {"endpoint_url": endpoint, "region_name": region, "addressing_style": "path", **extra},
        }
    )


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

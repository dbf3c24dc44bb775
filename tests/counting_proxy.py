"""A counting reverse proxy in front of the tests' S3 server, and the Airflow connection JSON that points at it.

A module of its own (not conftest.py): tests import these by name, and importing conftest.py by name would run it a
second time as another module (a second AIRFLOW_HOME, under the first one's migrated DB).
"""

from __future__ import annotations

import subprocess
import json as _json
import socket as _socket
import threading as _threading
import time as _time
from http.client import HTTPConnection as _HTTPConnection
from http.server import BaseHTTPRequestHandler as _BaseHandler
from http.server import ThreadingHTTPServer as _ThreadingHTTPServer

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}


def _free_port() -> int:
    with _socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = _time.monotonic() + timeout
    while _time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with _socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            _time.sleep(0.1)
    raise RuntimeError(f"server did not listen on port {port} within {timeout}s")


class CountingProxy:
    """Loopback reverse proxy in front of the S3 server.

    `requests` holds one dict per request: method, path, query, status, bytes_in (request body),
    bytes_out (response body bytes actually sent) and the request's headers (names lower-cased). `throttle_bytes_per_s` slows every response body
    down (per response) so a test can interrupt a transfer half-way or make it long enough to log
    progress. `corrupt_object_bodies` flips the first byte of every object GET response body (a
    transfer corrupted on the way, which only an MD5 check notices); `corrupt_put_etags` answers every PUT with an ETag
that is no object's MD5 (a store that kept other bytes than it was sent); `refuse_checksum_headers` answers every
    PUT / POST that carries a checksum header (x-amz-checksum-*, x-amz-sdk-checksum-algorithm) with 400 InvalidArgument,
    as an S3-compatible store that knows none would. `fail_requests(status, code, count)` answers
    the next `count` requests (-1: all) itself with that S3 error (a store shedding load with 503 SlowDown, say:
    the real server cannot be made to do that on demand).
    """

    def __init__(self, upstream_port: int, name: str) -> None:
        self.name = name
        self.upstream_port = upstream_port
        self.requests: list[dict] = []
        self.throttle_bytes_per_s = 0
        self.corrupt_object_bodies = False
        self.corrupt_put_etags = False
        self.refuse_checksum_headers = False
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
                if proxy._take_failure(self) or proxy._refuse_checksums(self):
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
                    "headers": {key.lower(): value for key, value in self.headers.items()},
                }
                with proxy._lock:
                    proxy.requests.append(record)
                self.send_response_only(response.status, response.reason)
                headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS]
                if proxy.corrupt_put_etags and self.command == "PUT":
                    headers = [(k, '"' + "0" * 32 + '"' if k.lower() == "etag" else v) for k, v in headers]
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

    def _refuse_checksums(self, handler) -> bool:
        """Answer a write that carries a checksum header with 400 InvalidArgument, if `refuse_checksum_headers`."""
        names = [key.lower() for key in handler.headers.keys()]
        if not (self.refuse_checksum_headers and handler.command in ("PUT", "POST") and
                any(n.startswith("x-amz-checksum-") or n == "x-amz-sdk-checksum-algorithm" for n in names)):
            return False
        with self._lock:
            self.requests.append({"method": handler.command, "path": handler.path.split("?", 1)[0],
                                  "query": handler.path.split("?", 1)[1] if "?" in handler.path else "",
                                  "status": 400, "bytes_in": 0, "bytes_out": 0,
                                  "headers": {key.lower(): value for key, value in handler.headers.items()}})
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidArgument</Code>'
                b"<Message>Unsupported header x-amz-checksum.</Message></Error>")
        handler.send_response_only(400)
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return True

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
        self.throttle_bytes_per_s = 0
        self.corrupt_object_bodies = False
        self.corrupt_put_etags = False
        self.refuse_checksum_headers = False
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


def point_boto3_at(monkeypatch, server, endpoint: str, home) -> None:
    """boto3's own AWS_* variables (what the SDK and user scripts read) aimed at `endpoint` with the server's keys;
    no profile, config or credentials file of this machine, no retry or checksum settings of its environment."""
    for name in ("AWS_PROFILE", "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
                 "AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "no-aws-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)

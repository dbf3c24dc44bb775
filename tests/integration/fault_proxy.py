"""A fault-injecting HTTP proxy in front of the real S3 server (MinIO): the faults a store and a network produce.

MinIO cannot be made to shed load or cut connections on demand, so this proxy of ours does it, and only it: every
request goes to the real server, which signs, stores and lists as in production. A fraction `rate` of requests
gets one of these faults:

- ``slowdown``: 503 SlowDown with S3's XML error body, without reaching the server (a store shedding load);
- ``reset``: the request reaches the server (a PUT is applied), then the response is cut by a TCP reset after
  half its body (before any byte when the body is empty: the client cannot know whether its write landed);
- ``truncate``: Content-Length says the whole body, half of it is sent, then the connection closes cleanly;
- ``stall``: the response comes after a 2 s pause;
- ``denied`` (only when a test picks it through `choose`): 403 AccessDenied, a fault no retry can fix.

Which requests fail is reproducible: the decision is a hash of the seed, the request (method, path, Range,
partNumber) and how often that request was seen before, so it does not depend on the order threads send in, and
a retry of a failed request gets a fresh draw (the bucket's name is left out: tests make random ones). `injected` counts the faults by kind (tests assert that faults did
happen: a test whose proxy injected nothing proves nothing).
"""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
import time
from collections import Counter
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

KINDS = ("slowdown", "reset", "truncate", "stall")
STALL_SECONDS = 2.0
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}
_ERRORS = {
    "slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "denied": (403, "Forbidden", "AccessDenied", "Access Denied."),
}


class FaultProxy:
    """Loopback reverse proxy to `upstream_port` injecting faults into `rate` of the requests (0 <= rate <= 1).

    `kinds`: which faults to draw from (default: all four, equally likely). `only`: a predicate on
    (method, key, query) choosing the requests that may fail (default: all). `choose`: instead of drawing, a
    function of (method, key, query) returning the fault for a request (or None), for tests that aim at one
    request. `requests` counts every request seen, `injected` the faults by kind.
    """

    def __init__(self, upstream_port: int, *, rate: float = 0.0, seed: int = 0, kinds=KINDS, only=None) -> None:
        self.upstream_port = upstream_port
        self.rate = rate
        self.seed = seed
        self.kinds = tuple(kinds)
        self.only = only
        self.choose = None
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (ConnectionError, socket.timeout):
                    self.close_connection = True

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _serve(self) -> None:
                body = self._body()
                fault = proxy._draw(self.command, self.path, self.headers)
                if fault in _ERRORS:
                    status, reason, code, message = _ERRORS[fault]
                    xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
                           f"</Message><Resource>{self.path.split('?')[0]}</Resource><RequestId>FAULTPROXY"
                           "</RequestId></Error>").encode()
                    self.send_response_only(status, reason)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(xml)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(xml)
                    return
                if fault == "stall":
                    time.sleep(STALL_SECONDS)
                upstream = HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                try:
                    # The Host header goes unchanged: it is part of the SigV4 signature.
                    upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for key, value in self.headers.items():
                        if key.lower() not in _HOP_HEADERS and key.lower() != "content-length":
                            upstream.putheader(key, value)
                    if body or self.command in ("PUT", "POST"):
                        upstream.putheader("Content-Length", str(len(body)))
                    upstream.endheaders(body or None)
                    response = upstream.getresponse()
                    data = response.read()
                    headers = [(k, v) for k, v in response.getheaders()
                               if k.lower() not in _HOP_HEADERS and k.lower() != "content-length"]
                finally:
                    upstream.close()
                length = int(response.getheader("Content-Length") or len(data))
                if fault in ("reset", "truncate") and not data:
                    self._reset()  # no body to cut: no response at all, after the server acted on the request
                    return
                self.send_response_only(response.status, response.reason)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                if self.command == "HEAD" or response.status in (204, 304):
                    return
                if fault in ("reset", "truncate"):
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if fault == "reset":
                        self._reset()
                    self.close_connection = True  # truncate: a clean FIN, short of what Content-Length promised
                    return
                self.wfile.write(data)

            def _reset(self) -> None:
                # SO_LINGER with a zero timeout: close() sends RST instead of FIN (a connection reset by peer).
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def _draw(self, method: str, path: str, headers) -> str | None:
        """The fault for this request, or None: reproducible from the seed and the request's identity."""
        target, _, query = path.partition("?")
        params = parse_qs(query, keep_blank_values=True)
        # Buckets have random names in the tests: the key within the bucket names the request.
        key = target.lstrip("/").partition("/")[2]
        identity = " ".join((method, key, headers.get("Range") or "", ",".join(params.get("partNumber", [])),
                             ",".join(sorted(k for k in params if k in ("uploads", "uploadId", "list-type")))))
        with self._lock:
            self.requests += 1
            nth = self._seen[identity]
            self._seen[identity] += 1
            if self.choose is not None:
                kind = self.choose(method, key, query)
                if kind:
                    self.injected[kind] += 1
                return kind
            if not self.rate or not self.kinds or (self.only is not None and not self.only(method, key, query)):
                return None
            digest = hashlib.sha256(f"{self.seed}|{identity}|{nth}".encode()).digest()
            draw = int.from_bytes(digest[:8], "big") / 2**64
            if draw >= self.rate:
                return None
            kind = self.kinds[int.from_bytes(digest[8:12], "big") % len(self.kinds)]
            self.injected[kind] += 1
            return kind

    def set(self, *, rate: float | None = None, seed: int | None = None, kinds=None, only=None, choose=None) -> None:
        """Change the faults for what follows, and start counting afresh."""
        with self._lock:
            self.choose = choose
            if rate is not None:
                self.rate = rate
            if seed is not None:
                self.seed = seed
            if kinds is not None:
                self.kinds = tuple(kinds)
            self.only = only
            self.injected.clear()
            self._seen.clear()
            self.requests = 0

    @property
    def total_injected(self) -> int:
        with self._lock:
            return sum(self.injected.values())

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

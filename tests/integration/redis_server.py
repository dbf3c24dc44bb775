"""Redis for the CeleryExecutor's tests: Debian's redis-server (`make redis` installs it), a private server.

    from redis_server import redis_server               # a session-scoped pytest fixture (import it in the module)

    def test_something(redis_server):
        broker = redis_server.url                      # redis://127.0.0.1:PORT/0

Each session gets its own server on a free loopback port, its files in a temporary directory, nothing saved to disk;
the system's redis-server service (if any) is never touched.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    def __init__(self):
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = _free_port()
        self.dir: Path | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30) -> RedisServer:
        if not Path(self.binary).is_file():
            pytest.fail("redis-server is missing: run `make redis` (make test does), or apt-get install redis-server")
        self.dir = Path(tempfile.mkdtemp(prefix="redis-"))
        with (self.dir / "redis.log").open("ab") as out:
            self.proc = subprocess.Popen(
                [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
                 "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"redis-server exited with {self.proc.returncode}:\n{self.log_tail()}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            assert time.monotonic() < deadline, f"redis-server not ready after {timeout} s:\n{self.log_tail()}"
            time.sleep(0.2)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.dir / "redis.log" if self.dir else None
        return path.read_text(errors="replace")[-chars:] if path and path.is_file() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture(scope="session")
def redis_server():
    with RedisServer() as server:
        yield server

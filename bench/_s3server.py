"""The loopback S3 endpoint the benchmarks run against: `python -m moto.server` on a free port.

The same approach as the test fixtures in tests/conftest.py (a real HTTP server in a child process, nothing in
boto3 patched), minus the IAM authentication and the counting proxy: a benchmark wants the server as fast as it
can be, and every client (ours, awscli, s5cmd) talks to it directly. The server is single-process Python, so it
is usually the bottleneck for small objects; `probe_max_rate` measures its ceiling with a trivial client so the
tables can show it.
"""

from __future__ import annotations

import atexit
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ACCESS_KEY = "bench"
SECRET_KEY = "bench-secret"
REGION = "us-east-1"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _die_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGTERM when the bench process dies (even by SIGKILL)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a running process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15 of stat(5))


class S3Server:
    """A moto S3 server on 127.0.0.1 (started by `start`, stopped by `stop` or the context manager)."""

    def __init__(self, log_path: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log_path = log_path
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        log = open(self._log_path, "wb") if self._log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"moto server did not listen on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid) if self.process else 0.0

    # -- clients --------------------------------------------------------------------------------------------------

    def client(self, max_pool_connections: int = 32):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(
                s3={"addressing_style": "path"},
                max_pool_connections=max_pool_connections,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def tool_env(self) -> dict[str, str]:
        """Environment for awscli / s5cmd child processes and the Airflow connection `aws_default`."""
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            AWS_DEFAULT_REGION=REGION,
            AWS_REGION=REGION,
            AWS_EC2_METADATA_DISABLED="true",
            NO_PROXY="*",
        )
        env.update(self.airflow_connection_env())
        return env

    def airflow_connection_env(self) -> dict[str, str]:
        conn = {
            "conn_type": "aws",
            "login": ACCESS_KEY,
            "password": SECRET_KEY,
            "extra": {"endpoint_url": self.url, "region_name": REGION, "addressing_style": "path"},
        }
        return {"AIRFLOW_CONN_AWS_DEFAULT": json.dumps(conn)}

    # -- data -----------------------------------------------------------------------------------------------------

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def put_tree(self, bucket: str, prefix: str, local_dir: str, threads: int = 16) -> int:
        """Upload every file under local_dir to bucket/prefix/<relative path> (setup; not timed)."""
        client = self.client(max_pool_connections=threads + 4)
        paths = []
        for root, _, files in os.walk(local_dir):
            paths += [os.path.join(root, f) for f in files]

        def put(path: str) -> None:
            key = prefix + os.path.relpath(path, local_dir).replace(os.sep, "/")
            if os.path.getsize(path) > 64 * 1024 * 1024:
                client.upload_file(path, bucket, key)
            else:
                with open(path, "rb") as fh:
                    client.put_object(Bucket=bucket, Key=key, Body=fh.read())

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(put, paths))
        return len(paths)

    # -- the server's own ceiling ---------------------------------------------------------------------------------

    def probe_max_rate(self, bucket: str, key: str, seconds: float = 5.0, threads: int = 8) -> dict:
        """GET one object as fast as the server answers, with a trivial client: raw HTTP/1.1 on a presigned URL
        (signed once), no parsing beyond the status line, the body read and dropped. Returns requests/s, MB/s
        and the server's CPU use."""
        stop = time.monotonic() + seconds
        counts = [0] * threads
        nbytes = [0] * threads
        url = self.client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600)
        path = url.split(f":{self.port}", 1)[1]

        def worker(i: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            while time.monotonic() < stop:
                conn.request("GET", path, headers={"Host": f"127.0.0.1:{self.port}"})
                response = conn.getresponse()
                body = response.read()
                if response.status != 200:
                    raise RuntimeError(f"probe GET {path}: HTTP {response.status}")
                counts[i] += 1
                nbytes[i] += len(body)
            conn.close()

        cpu0, t0 = self.cpu_seconds(), time.monotonic()
        workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.monotonic() - t0
        server_cpu = self.cpu_seconds() - cpu0
        return {
            "requests_per_s": sum(counts) / wall,
            "mb_per_s": sum(nbytes) / wall / 1e6,
            "server_cpu_per_request_ms": 1000 * server_cpu / max(1, sum(counts)),
            "server_cores_busy": server_cpu / wall,
        }

"""A real S3 server for tests and benchmarks: MinIO, single node, one temporary drive, on a free loopback port.

The binary is built from MinIO's Go module at the version pinned in the Makefile (`make minio`, which `make test`
and `make bench` depend on) and cached outside the repository under $(TOOLS_CACHE)/minio-<version>/minio, so a
fresh clone on the same machine (CI) reuses it. `MINIO_BIN` (exported by the Makefile) names it; without it the
default cache path is derived from the Makefile's pin, so `pytest` run by hand finds the same binary.

Used by tests/conftest.py (the session's S3 fixtures) and bench/_s3server.py (the benchmarks' endpoint).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def pinned_version() -> str:
    """MINIO_VERSION from the Makefile: the one place the version is pinned."""
    match = re.search(r"^MINIO_VERSION\s*:?=\s*(\S+)", (REPO / "Makefile").read_text(), re.M)
    if not match:
        raise RuntimeError("Makefile has no MINIO_VERSION line")
    return match.group(1)


def minio_binary() -> str:
    """Path of the pinned MinIO binary; a clear error (what to run) when it has not been built."""
    path = os.environ.get("MINIO_BIN")
    if not path:
        cache = os.environ.get("TOOLS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "training-jobs")
        path = os.path.join(cache, f"minio-{pinned_version()}", "minio")
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"MinIO binary {path} not found: build it with `make minio` (go install github.com/minio/minio@"
            f"{pinned_version()}, a few minutes once; `make test` does it)"
        )
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def process_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a running process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15 of stat(5))


def process_peak_rss_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a running process, in MB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    return 0.0


_DRIVE_PREFIX = "minio-test-"


def _remove_orphaned_drives() -> None:
    """Remove drives left in memory by test runs that were killed (their owner process is gone)."""
    root = _memory_tmp() or tempfile.gettempdir()
    for name in os.listdir(root):
        if not name.startswith(_DRIVE_PREFIX):
            continue
        path = os.path.join(root, name)
        try:
            with open(os.path.join(path, "owner.pid")) as fh:
                os.kill(int(fh.read().strip()), 0)  # raises if no such process
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError):
            pass  # being created right now, or not ours to judge


def _memory_tmp() -> str | None:
    """/dev/shm if it is a writable directory (tmpfs on Linux), else None (the default temp directory)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _die_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGTERM when the parent dies (even by SIGKILL), so a killed
    test run never leaves a server behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class MinioServer:
    """`minio server` on 127.0.0.1:<free port> with a temporary drive; the root user is the S3 access key.

    `host` is the address it listens on (loopback by default; bench/bench_cluster_staging.py gives the real node's
    bridge gateway, where the node's pods reach it directly, with no relay in between).

    `env` adds MinIO settings (e.g. {"MINIO_API_REQUESTS_MAX": "1"} for a server that throttles). Without a
    `data_dir` the drive is a new directory in /dev/shm where there is one: MinIO fsyncs every object it writes,
    and on a disk shared with other builds that made each small PUT take ~10 ms; in memory it costs nothing (the
    test objects are small, and the directory is removed by `stop`).
    """

    def __init__(
        self,
        access_key: str = "trainer",
        secret_key: str = "trainer-secret-key",
        *,
        data_dir: str | None = None,
        log_path: str | None = None,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.access_key = access_key
        self.host = host
        self.secret_key = secret_key
        self.port = 0
        self.url = ""
        self.process: subprocess.Popen | None = None
        self._own_dir = data_dir is None
        if data_dir is None:
            _remove_orphaned_drives()
            data_dir = tempfile.mkdtemp(prefix=_DRIVE_PREFIX, dir=_memory_tmp())
            with open(os.path.join(data_dir, "owner.pid"), "w") as fh:
                fh.write(str(os.getpid()))
        self.data_dir = data_dir
        self._log_path = log_path
        self._env = env or {}

    def __enter__(self) -> MinioServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> MinioServer:
        binary = minio_binary()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MINIO_", "AWS_"))}
        env.update(
            MINIO_ROOT_USER=self.access_key,
            MINIO_ROOT_PASSWORD=self.secret_key,
            MINIO_BROWSER="off",  # no web console
            MINIO_UPDATE="off",
        )  # no MINIO_REGION: the server then accepts requests signed for any region (the cos connections' too)
        env.update(self._env)
        drive = os.path.join(self.data_dir, "drive")
        certs = os.path.join(self.data_dir, "certs")  # not ~/.minio: nothing outside the temp dir
        os.makedirs(drive, exist_ok=True)
        for attempt in range(3):  # the free port can be taken between our probe and MinIO's bind
            self.port = free_port(self.host)
            self.url = f"http://{self.host}:{self.port}"
            log = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL
            self.process = subprocess.Popen(
                [binary, "server", "--quiet", "--address", f"{self.host}:{self.port}",
                 "--console-address", f"{self.host}:{free_port(self.host)}", "--certs-dir", certs, drive],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
            if log is not subprocess.DEVNULL:
                log.close()
            if self._wait_ready(timeout):
                return self
            code = self.process.returncode
            self.stop()
            if attempt == 2:
                where = f"; see {self._log_path}" if self._log_path else ""
                raise RuntimeError(f"MinIO ({binary}) did not become ready on {self.url} (exit code {code}){where}")
        return self

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/minio/health/ready", timeout=1) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid) if self.process else 0.0

    def peak_rss_mb(self) -> float:
        return process_peak_rss_mb(self.process.pid) if self.process else 0.0

    def client(self, region: str = REGION, max_pool_connections: int = 32):
        """A boto3 client talking to the server directly."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                max_pool_connections=max_pool_connections,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

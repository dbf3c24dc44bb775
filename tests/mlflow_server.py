"""A real MLflow tracking server for the tests: `mlflow server` on a free loopback port, a SQLite store and an
artifact directory in a temporary directory.

MLflow's server pins clash with Airflow's, so it has its own venv, built once from the pinned
tests/mlflow_server_requirements.txt (`make mlflow-server`, which `make test` depends on; or
`python tests/mlflow_server.py build`) under $(TOOLS_CACHE)/mlflow-server-<hash of the pins>, so a fresh clone on the
same machine reuses it. The workers talk to it through mlflow-skinny, installed with Airflow (requirements.txt).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from minio_server import _die_with_parent, free_port  # noqa: E402  (tests/minio_server.py)

REQUIREMENTS = HERE / "mlflow_server_requirements.txt"


def venv_dir() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:12]
    cache = os.environ.get("TOOLS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "training-jobs")
    return Path(cache) / f"mlflow-server-{digest}"


def server_binary() -> Path:
    """The `mlflow` console script of the built venv; a clear error (what to run) when it was not built."""
    target = venv_dir()
    if not (target / ".complete").exists():
        raise RuntimeError(f"the MLflow server venv {target} is not built: run `make mlflow-server` (pip installs "
                           f"{REQUIREMENTS.name}, a few minutes once; `make test` does it)")
    return target / "bin" / "mlflow"


def build(log=print) -> Path:
    """Build the server's venv (once: a venv counts only when .complete is written; a lock keeps builds apart)."""
    target = venv_dir()
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        started = time.monotonic()
        log(f"building the MLflow server venv in {target} (pinned in {REQUIREMENTS.name}) ...")
        shutil.rmtree(target, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(target)
        subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "-r", str(REQUIREMENTS)], check=True)
        (target / ".complete").write_text(f"built from {REQUIREMENTS}\n")
        log(f"built the MLflow server venv in {time.monotonic() - started:.0f} s")
    return target


class MlflowServer:
    """`mlflow server` on 127.0.0.1:<free port>: SQLite backend store, artifacts served from a temporary folder."""

    def __init__(self, log_path: str | None = None):
        self.dir = tempfile.mkdtemp(prefix="mlflow-test-")
        self.log_path = log_path or os.path.join(self.dir, "server.log")
        self.port = 0
        self.url = ""
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 180.0) -> MlflowServer:
        binary = server_binary()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", PYTHONUNBUFFERED="1")
        for attempt in range(3):  # the free port can be taken between our probe and the server's bind
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [str(binary), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                     "--backend-store-uri", f"sqlite:///{self.dir}/mlflow.db",
                     "--artifacts-destination", f"{self.dir}/artifacts"],
                    env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir, preexec_fn=_die_with_parent,
                    start_new_session=True)
            if self._wait_ready(timeout) and self._warm_up(timeout):
                return self
            code = self.process.returncode
            self.stop(keep_dir=True)
            if attempt == 2:
                raise RuntimeError(f"mlflow server did not become ready on {self.url} (exit code {code}); see "
                                   f"{self.log_path}")
        return self

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False

    def _warm_up(self, timeout: float) -> bool:
        """One API call with time to spare: the server's first request (its store's first query) may be slow on a
        busy machine, and the platform's client gives a server 30 s before it turns tracking off."""
        try:
            with urllib.request.urlopen(f"{self.url}/api/2.0/mlflow/experiments/search?max_results=1",
                                        timeout=timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, keep_dir: bool = False) -> None:
        if self.process and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 15)  # its own session: the server and the workers it forked
            except ProcessLookupError:
                pass
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def client(self):
        """MLflow's client (mlflow-skinny, from the test's own venv) talking to this server."""
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.url, registry_uri=self.url)


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python tests/mlflow_server.py build")
    build()

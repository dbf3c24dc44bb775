"""PostgreSQL for the production-shaped tests: Debian's package (`make postgres` installs it), a private cluster.

    from postgres_server import postgres_server         # a session-scoped pytest fixture (import it in the module)

    def test_something(postgres_server):
        url = postgres_server.url                      # postgresql+psycopg2://airflow@127.0.0.1:PORT/airflow

Each session gets its own cluster: `initdb` in a temporary directory, the server on a free loopback port with its
socket in that directory, so several engineers' clusters run side by side and none touches the system's
`postgresql` service. PostgreSQL refuses to run as root, so under root the cluster belongs to `nobody` (the data
directory is chowned to it and the server started with that uid). Durability is traded for speed (fsync off): the
data is thrown away at the end of the session.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

NOBODY = 65534
DB = "airflow"
IDLE_IN_TRANSACTION_MS = 60_000
USER = "airflow"


def pg_bindir() -> str | None:
    """Debian keeps the server binaries in /usr/lib/postgresql/<major>/bin (not on PATH): the newest one there."""
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if os.access(os.path.join(bindir, "initdb"), os.X_OK):
            return bindir
    found = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(found)) if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    def __init__(self):
        self.bindir = pg_bindir()
        self.dir: Path | None = None
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.migrated_template: str | None = None  # a database `airflow db migrate` made (airflow_server.py)

    @property
    def url(self) -> str:
        return self.url_of(DB)

    def url_of(self, database: str) -> str:
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, template: str | None = None) -> str:
        """A second database in the session's cluster (a deployment of its own beside the one on `url`), a copy of
        `template` when given (no session may be connected to that one); its URL."""
        copy = f" TEMPLATE {template}" if template else ""
        self.sql(f"CREATE DATABASE {name}{copy} OWNER {USER}", database="postgres")
        return self.url_of(name)

    def _as_owner(self) -> dict:
        # PostgreSQL refuses root; the cluster belongs to nobody then (pass the uid to Popen, no su/runuser wrapper
        # in between that would have to forward our signals).
        return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}

    def start(self, timeout: float = 60) -> PostgresServer:
        if not self.bindir:
            pytest.fail("PostgreSQL is not installed: run `make postgres` (Debian's postgresql package, as root)")
        self.dir = Path(tempfile.mkdtemp(prefix="pg-airflow-"))
        if os.geteuid() == 0:
            os.chown(self.dir, NOBODY, NOBODY)
        data = self.dir / "data"
        initdb = subprocess.run(
            [f"{self.bindir}/initdb", "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync",
             "--locale=C"], capture_output=True, text=True, cwd=self.dir, **self._as_owner())
        assert initdb.returncode == 0, initdb.stderr[-2000:]
        log = (self.dir / "postgres.log").open("wb")
        if os.geteuid() == 0:
            os.fchown(log.fileno(), NOBODY, NOBODY)
        self.proc = subprocess.Popen(
            [f"{self.bindir}/postgres", "-D", str(data), "-p", str(self.port), "-k", str(self.dir),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "shared_buffers=64MB",
             # As docs/operations.md asks of a deployment: a scheduler killed mid-transaction leaves its connection
             # open (its LocalExecutor workers inherited the socket), and the rows it had locked stay locked.
             "-c", f"idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True, **self._as_owner())
        log.close()
        self._wait_ready(timeout)
        self.sql(f"CREATE DATABASE {DB} OWNER {USER}", database="postgres")
        return self

    def sql(self, statement: str, database: str = DB):
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, dbname=database)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    def _wait_ready(self, timeout: float) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"postgres exited with {self.proc.returncode}:\n{self.log_tail()}"
            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres").close()
                return
            except psycopg2.OperationalError:
                assert time.monotonic() < deadline, f"postgres not ready after {timeout} s:\n{self.log_tail()}"
                time.sleep(0.3)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.dir / "postgres.log" if self.dir else None
        return path.read_text(errors="replace")[-chars:] if path and path.is_file() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(2)  # SIGINT: PostgreSQL's fast shutdown (disconnects clients, no waiting)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture(scope="session")
def postgres_server():
    with PostgresServer() as server:
        yield server

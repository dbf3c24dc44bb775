"""A real Airflow for tests: the components `make airflow` serves (api-server, scheduler, dag-processor, triggerer),
started as separate processes on a FREE loopback port with their own AIRFLOW_HOME in a temporary directory.

    from airflow_server import airflow_server          # a session-scoped pytest fixture (import it in the module)

    def test_something(airflow_server):
        api = airflow_server.api                        # logged-in REST client (JWT from POST /auth/token)
        status, run = api.call("POST", "/api/v2/dags/training_job/dagRuns", {"logical_date": None, "conf": {...}})
        run = airflow_server.wait_for_run("training_job", run["dag_run_id"])

Or outside pytest: `with AirflowServer(tmp_dir) as server: ...`. `AirflowServer(home, db_url=...)` puts the metadata DB
elsewhere (`airflow_deployment(..., postgres)` on a database of the session's PostgreSQL, as production runs);
`kill(name)` / `restart(name)` kill and start one component. What it shares with `make airflow`: the repository's
airflow.cfg, dags/ and plugins/, and the secrets file written by tools/airflow_secrets.py (jwt secret, [api]
secret_key, fernet key) loaded into every component's environment. What differs: AIRFLOW_HOME (a temp dir with its
own logs and workspace; the fixtures' metadata DB is a database of its own on the session's PostgreSQL, a copy of
the one `airflow db migrate` made for the session (migrated_template), without one SQLite in the home), the port
(api-server, worker and triggerer log servers: all free ports, so several engineers' servers run side by side), a
known admin password, 1 s scheduler heartbeat.
On failure, each component's output is in `<home>/<component>.log` (`server.log_tail(name)`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = [sys.executable, "-m", "airflow"]
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
PASSWORD = "admin-password-of-the-test-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Api:
    """A tiny REST client: JSON in, (status, JSON) out; the bearer token comes from POST /auth/token."""

    def __init__(self, base: str):
        self.base = base
        self.token: str | None = None

    # The client waits longer than the server's SQLite lock wait (60 s, below): a request queued behind a stalled writer
    # on a loaded machine answers late, it does not hang (a CI run timed out a POST /dagRuns at exactly 60 s).
    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 150) -> tuple[int, dict]:
        status, raw, _ = self.raw(method, path, body, timeout)
        try:
            return status, json.loads(raw or b"{}")
        except ValueError:
            return status, {"raw": raw.decode(errors="replace")}

    def raw(self, method: str, path: str, body: dict | None = None, timeout: float = 150) -> tuple[int, bytes, dict]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as err:
            return err.code, err.read(), dict(err.headers)

    def login(self, username: str = "admin", password: str = PASSWORD) -> None:
        status, body = self.call("POST", "/auth/token", {"username": username, "password": password})
        assert status == 201, body
        self.token = body["access_token"]


class AirflowServer:
    def __init__(self, home: Path, extra_env: dict[str, str] | None = None, db_url: str | None = None,
                 migrated: bool = False):
        self.home = Path(home)
        self.db_url = db_url  # None: SQLite in the home (airflow.cfg's embedded default)
        self.migrated = migrated  # db_url is a copy of a database `airflow db migrate` made (migrated_template)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.password = PASSWORD
        self.api = Api(self.base_url)
        self.procs: dict[str, subprocess.Popen] = {}
        self._groups: list[int] = []  # every component process group started (pgid = its first pid)
        self.extra_env = dict(extra_env or {})
        self.env: dict[str, str] = {}

    # -- lifecycle ----------------------------------------------------------------------------------------
    def __enter__(self) -> AirflowServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 240) -> None:
        self.prepare()
        if not self.migrated:
            self.migrate()
        for name in COMPONENTS:
            self.start_component(name)
        self._wait_healthy(timeout)
        self.api.login()
        self._wait_for_dag("training_job", timeout)

    def migrate(self) -> None:
        migrate = subprocess.run([*AIRFLOW, "db", "migrate"], env=self.env, capture_output=True, text=True,
                                 timeout=300)
        assert migrate.returncode == 0, migrate.stderr[-3000:]

    def prepare(self) -> None:
        """The home (airflow.cfg, passwords, secrets) and the components' environment (self.env)."""
        home = self.home
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "airflow.cfg", home / "airflow.cfg")
        (home / "passwords.json").write_text(json.dumps({"admin": self.password}))
        subprocess.run([sys.executable, str(REPO / "tools" / "airflow_secrets.py"), str(home / "airflow-secrets.env")],
                       check=True, capture_output=True)
        secrets = _read_env(home / "airflow-secrets.env")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
        env.update(secrets)
        env.update({
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            # A task's calls to the execution API time out after 5 s by default; on a loaded CI machine the first
            # task of a fresh server was killed that way before it logged anything (its run failed for no reason).
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__TRAINING__WORKSPACE": str(home / "workspace"),
            # the suite's local roots (tests/conftest.py): the tests' inputs and outputs live in temp dirs
            "AIRFLOW__TRAINING__LOCAL_ROOTS": os.environ.get("AIRFLOW__TRAINING__LOCAL_ROOTS", ""),
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "runtime"), os.environ.get("PYTHONPATH", "")]),
            "NO_PROXY": "*",
        })
        if self.db_url:  # the production switch docs/operations.md describes: one environment variable
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.db_url
        else:
            # SQLite's single writer: sqlite3 waits 5 s for the lock by default, and on a loaded CI machine a task's
            # PATCH held it that long, so a trigger's POST failed with "Database error" (database is locked).
            # SQLAlchemy passes `timeout` on to sqlite3 (and aiosqlite); 60 s rides out such a stall.
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}?timeout=60"
        env.update(self.extra_env)
        self.env = env

    def start_component(self, name: str, command: list[str] | None = None,
                        env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start `airflow <name>`, or `airflow <command...>` under that name (a Celery worker: command=["celery",
        "worker", ...]) with `env` over the deployment's environment."""
        cmd = [*AIRFLOW, *(command or [name])]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)] if name == "api-server" else []
        with (self.home / f"{name}.log").open("ab") as out:  # the child keeps its own copy of the descriptor
            self.procs[name] = subprocess.Popen(cmd, env={**self.env, **(env or {})}, cwd=self.home, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        self._groups.append(self.procs[name].pid)
        return self.procs[name]

    def kill_tree(self, name: str) -> list[int]:
        """kill -9 one component and every process under it, whatever their process group (a Celery worker's task
        runs in a group of its own): what a lost machine does to them. It is no longer a component; its pids."""
        import psutil

        proc = self.procs.pop(name)
        tree = [psutil.Process(proc.pid)]
        try:
            tree += tree[0].children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        for process in tree:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        proc.wait(30)
        psutil.wait_procs(tree[1:], timeout=30)
        return [p.pid for p in tree]

    def kill(self, name: str, sig: int = signal.SIGKILL, group: bool = False) -> None:
        """kill -9 one component's main process (group=True: its whole process group, e.g. LocalExecutor's workers
        with the scheduler) and reap it."""
        proc = self.procs[name]
        (os.killpg if group else os.kill)(proc.pid, sig)
        proc.wait(30)

    def restart(self, name: str, timeout: float = 120) -> None:
        """Start a killed (or stopped) component again and wait until the API server says it is healthy."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        self.start_component(name)
        self._wait_healthy(timeout)

    def stop(self) -> None:
        # Every process group ever started, not only the live components': a component killed with -9 leaves its
        # children (LocalExecutor's workers, log servers) behind in its group.
        for pgid in reversed(self._groups):
            _signal_group(pgid, signal.SIGTERM)
        # One deadline for all of them: waiting 30 s per component that ignores SIGTERM (the scheduler draining its
        # executor, the API server's workers) made the teardown of a test session take a minute. The API server alone
        # took 6-14 s to exit on SIGTERM, at each of the ~9 deployments of `make test`; nothing of a deployment is kept
        # after stop(), so what has not exited in 5 s is killed.
        deadline = time.monotonic() + 5
        while any(_signal_group(pgid, 0) for pgid in self._groups) and time.monotonic() < deadline:
            for proc in self.procs.values():
                proc.poll()  # reap, or a zombie keeps its group alive
            time.sleep(0.2)
        for pgid in self._groups:
            _signal_group(pgid, signal.SIGKILL)
        for proc in self.procs.values():
            proc.poll()

    def log_tail(self, name: str, chars: int = 4000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.is_file() else ""

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            assert proc.poll() is None, f"airflow {name} exited with {proc.returncode}:\n{self.log_tail(name)}"

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                status, health = self.api.call("GET", "/api/v2/monitor/health", timeout=5)
                if status == 200 and all(health.get(c, {}).get("status") == "healthy"
                                         for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"Airflow not healthy after {timeout} s:\n{self.log_tail('api-server')}"
            time.sleep(0.5)

    def _wait_for_dag(self, dag_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.api.call("GET", f"/api/v2/dags/{dag_id}")[0] != 200:
            self._check_alive()
            assert time.monotonic() < deadline, f"{dag_id} not parsed after {timeout} s:\n{self.log_tail('dag-processor')}"
            time.sleep(1)

    # -- helpers for tests ----------------------------------------------------------------------------------
    def trigger(self, dag_id: str, conf: dict, run_id: str | None = None) -> dict:
        body = {"logical_date": None, "conf": conf, **({"dag_run_id": run_id} if run_id else {})}
        status, run = self.api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
        assert status == 200, run
        return run

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, run = self.api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            except OSError:  # a busy machine (SQLite writers, two shared cores) can stall one poll: poll again
                status, run = 0, {"state": None}
            assert status in (0, 200), run
            if run["state"] in ("success", "failed"):
                return run
            self._check_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"{dag_id} {run_id} still {run['state']} after {timeout} s; scheduler log:\n"
                            f"{self.log_tail('scheduler')}")
            time.sleep(1)

    def password_of(self, user: str) -> str:
        """The password the simple auth manager generated for `user` (a user of
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS; the session's server has alice and bob (`user`) and olivia (`op`))."""
        return json.loads((self.home / "passwords.json").read_text())[user]

    def user_api(self, user: str) -> Api:
        """A REST client logged in as `user`."""
        api = Api(self.base_url)
        api.login(user, self.password_of(user))
        return api

    def task_states(self, dag_id: str, run_id: str) -> dict:
        _, body = self.api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
        return {(t["task_id"], t["map_index"]): t["state"] for t in body["task_instances"]}


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False once it has no process left."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line.strip() and not line.startswith("#") and "=" in line)


def airflow_deployment(tmp_path_factory, postgres=None, db_url: str | None = None,
                       extra_env: dict[str, str] | None = None, name: str = "airflow-server") -> AirflowServer:
    """The real Airflow components in a fresh home: what every fixture of this kind starts (use it as a context).
    `postgres` (the session's PostgresServer): on a database of its own there, as a deployment runs
    (docs/operations.md); SQLite's single writer stalled the API's writes past a minute on a loaded CI machine."""
    if postgres is not None and db_url is None:
        template = migrated_template(tmp_path_factory, postgres)
        db_url = postgres.create_database(name.replace("-", "_"), template=template)
        return AirflowServer(tmp_path_factory.mktemp(name), extra_env=extra_env, db_url=db_url, migrated=True)
    return AirflowServer(tmp_path_factory.mktemp(name), extra_env=extra_env, db_url=db_url)


TEMPLATE_DB = "airflow_migrated"


def migrated_template(tmp_path_factory, postgres) -> str:
    """A database of the session's PostgreSQL that `airflow db migrate` migrated, once per session: each deployment's
    database is a copy of it (CREATE DATABASE ... TEMPLATE, a quarter of a second) instead of a migration of its own
    (25-35 s of CPU at load 7, for every served Airflow of the suite). The copy is the database the command makes:
    the schema, the default pool and connections, the log templates. Its name."""
    if not postgres.migrated_template:
        url = postgres.create_database(TEMPLATE_DB)
        maker = AirflowServer(tmp_path_factory.mktemp("airflow-migrate"), db_url=url)
        maker.prepare()
        maker.migrate()
        postgres.migrated_template = TEMPLATE_DB
    return postgres.migrated_template


@pytest.fixture(scope="session")
def airflow_server(tmp_path_factory, postgres_server):
    """One real Airflow per test session (about a minute to start); tests share it, so they use their own job names.
    Besides admin it has alice and bob (the auth manager's `User` role) and olivia (`Op`): `server.user_api("alice")`."""
    users = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,alice:user,bob:user,olivia:op"}
    with airflow_deployment(tmp_path_factory, postgres_server, extra_env=users) as server:
        yield server

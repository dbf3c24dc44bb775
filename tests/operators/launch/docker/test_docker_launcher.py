"""The Docker launcher's options, and the one thing the real engine cannot show here: a registry that answers
"rate limited". Everything else the launcher does is tested on the real engine (tests/integration/
test_docker_engine.py, test_docker_backend_dag.py); who a container runs as is judged here for every spelling of a
user, against an engine that answers only what a launch asks before it creates anything.

No registry is reachable from this machine, so a registry's 429 "toomanyrequests" answer to a pull cannot be
produced by the real engine; for that alone, a small fake of the Engine API's image endpoints on loopback answers
the real docker client (through the docker provider's DockerHook, as in production).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from operators.launch.docker import engine as docker_engine
from operators.launch.docker.launcher import DockerLauncherHook
from operators.launch.base import IMAGE_ERROR, USER_ERROR, LaunchRequest

IMAGE = "registry.example.com/training-runtime:1.0"


def make_request(tmp_path: Path, **overrides) -> LaunchRequest:
    values = dict(job_name="cifar-train", job_root=str(tmp_path / "ws" / "jobs" / "cifar-train"),
                  workspace=str(tmp_path / "ws"), layout="ti", instance_count=1, hosts=("cifar-train-0",),
                  image_uri=IMAGE, options={})
    values.update(overrides)
    return LaunchRequest(**values)


def test_kubernetes_options_in_the_same_spec_are_ignored_unknown_ones_and_root_refused(tmp_path):
    from operators.launch.spec import validate_spec

    spec = validate_spec({"job_name": "j", "source_dir": "s3://b/c/", "output_path": "s3://b/o", "entry_point": "t.py",
                          "backend": "docker", "kubernetes": {"namespace": "ml", "node_selector": {"a": "b"}},
                          "docker": {"shm_size": "2Gi"}})
    assert spec.backend_options() == {"shm_size": "2Gi"} and spec.ignored_sections() == ["kubernetes"]
    hook = DockerLauncherHook(docker_url="tcp://127.0.0.1:1")
    assert hook.configs(make_request(tmp_path, options=spec.backend_options()))
    with pytest.raises(ValueError, match="docker option 'namespace' is not a known option"):
        hook.configs(make_request(tmp_path, options={"namespace": "ml"}))
    for root in ("0", "root", "0:0", "00", "1000:0"):
        with pytest.raises(ValueError, match="training containers never run as root"):
            hook.run(make_request(tmp_path, options={"user": root}), lambda line: None)


class ImageEngine:
    """The engine as a launch sees it before it creates anything: the image's config (its USER), and no containers or
    network of the job. Creating anything is an AttributeError, so a refused launch shows it created nothing."""

    def __init__(self, user: str):
        self.user = user

    def inspect_image(self, image):
        return {"Id": "sha256:0", "Config": {"User": self.user}}

    def containers(self, **filters):
        return []

    def networks(self, **filters):
        return []


def image_hook(monkeypatch, image_user: str, ids: tuple[int, int] | None = None) -> DockerLauncherHook:
    """A launcher on ImageEngine, as a root worker (the image's USER applies then); `ids` is what the image's passwd
    says of a name (None: looking one up fails the test, since it takes a container)."""
    from operators.launch.docker import access

    def ids_in_image(client, image, user):
        assert ids is not None, f"{user!r} was looked up in the image"
        return ids

    monkeypatch.setattr(access, "worker_is_root", lambda: True)
    monkeypatch.setattr(docker_engine, "ids_in_image", ids_in_image)
    hook = DockerLauncherHook(docker_url="tcp://127.0.0.1:1")
    hook.__dict__["client"] = ImageEngine(image_user)
    return hook


def refusal(hook: DockerLauncherHook, request: LaunchRequest) -> str:
    """The launch's failure reason, checked to be a user error (no retry)."""
    result = hook.run(request, lambda line: None)
    assert (result.succeeded, result.failure_class, result.retryable) == (False, USER_ERROR, False), result
    return result.failure_reason


@pytest.mark.parametrize(("user", "ids", "why"), [("toor", (0, 0), "uid 0"), ("daemon", (1, 0), "gid 0"),
                                                  ("1000", (1000, 0), "gid 0")])
def test_a_user_option_that_is_uid_0_or_gid_0_in_the_image_is_refused(tmp_path, monkeypatch, user, ids, why):
    hook = image_hook(monkeypatch, "1000:1000", ids)
    assert refusal(hook, make_request(tmp_path, options={"user": user})) == (
        f"docker option user {user!r} is {why} in image {IMAGE}: training containers never run as root (uid 0 or "
        "gid 0); give a non-root uid:gid")


@pytest.mark.parametrize("user", ["1000:0", "1000:00", "1000:+0", "1000:root", "1000:ROOT", "1000:", "ml:root"])
def test_an_image_user_with_group_root_is_refused_without_a_container(tmp_path, monkeypatch, user):
    hook = image_hook(monkeypatch, user)
    assert refusal(hook, make_request(tmp_path)) == (
        f"image {IMAGE} runs as USER {user!r} (group root): training containers never run with uid 0 or gid 0; set "
        "USER to a non-root uid:gid in the image or give the docker option user")


@pytest.mark.parametrize(("user", "ids", "why"), [("toor", (0, 0), "uid 0"), ("ml", (1000, 0), "gid 0"),
                                                  ("1000", (1000, 0), "gid 0")])  # a uid without a passwd entry
def test_an_image_user_that_is_uid_0_or_gid_0_in_the_image_is_refused(tmp_path, monkeypatch, user, ids, why):
    hook = image_hook(monkeypatch, user, ids)
    assert refusal(hook, make_request(tmp_path)) == (
        f"image {IMAGE} runs as USER {user!r} ({why} in the image): training containers never run with uid 0 or "
        "gid 0; set USER to a non-root uid:gid in the image or give the docker option user")


@pytest.mark.parametrize("user", ["", "0", "00", "root", "0:0", "root:1000"])
def test_an_image_without_a_user_or_with_root_runs_as_the_default_user(tmp_path, monkeypatch, user):
    hook = image_hook(monkeypatch, user)
    request = make_request(tmp_path)
    lines: list[str] = []
    assert hook._run_as(request, hook._options(request), IMAGE, lines.append) == ("1000:1000", (1000, 1000))
    assert lines == [f"[docker] image {IMAGE} runs as root; running as 1000:1000 instead (set the docker option "
                     "user to choose)"]


@pytest.mark.parametrize(("user", "ids"), [("1000:1000", None), ("ml", (1000, 1000)), ("1000", (1000, 1000))])
def test_a_non_root_image_user_runs_as_itself(tmp_path, monkeypatch, user, ids):
    hook = image_hook(monkeypatch, user, ids)
    request = make_request(tmp_path)
    assert hook._run_as(request, hook._options(request), IMAGE, lambda line: None) == (user, (1000, 1000))


def test_every_container_gets_the_pids_limit_of_the_setting_or_the_constructor(tmp_path, monkeypatch):
    from operators.launch.docker.settings import docker_settings

    def pids_limit(hook: DockerLauncherHook):
        return hook.configs(make_request(tmp_path))[0]["HostConfig"].get("PidsLimit")

    assert docker_settings().pids_limit == 4096 and pids_limit(DockerLauncherHook()) == 4096
    assert pids_limit(DockerLauncherHook(pids_limit=64)) == 64
    monkeypatch.setenv("AIRFLOW__TRAINING_DOCKER__PIDS_LIMIT", "0")
    assert pids_limit(DockerLauncherHook()) is None  # 0: no limit, so the key is absent (the engine's default)
    monkeypatch.setenv("AIRFLOW__TRAINING_DOCKER__PIDS_LIMIT", "-1")
    with pytest.raises(ValueError, match=r"\[training.docker\] pids_limit must be an integer >= 0, got '-1'"):
        docker_settings()


def test_host_workspace_comes_from_airflow_cfg_only(tmp_path, monkeypatch):
    hook = DockerLauncherHook(docker_url="tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match=r"host_workspace is an admin setting: set \[training.docker\]"):
        hook.configs(make_request(tmp_path, options={"host_workspace": "/"}))
    monkeypatch.setenv("AIRFLOW__TRAINING_DOCKER__HOST_WORKSPACE", "/srv/airflow/workspace")
    binds = hook.configs(make_request(tmp_path))[0]["HostConfig"]["Binds"]
    assert binds[0].startswith("/srv/airflow/workspace/jobs/cifar-train:")


class FakeRegistryEngine:
    """The Engine API's image endpoints only: inspect (404 until pulled) and pull, whose next answers are set by the
    test (a registry error message each), then success."""

    def __init__(self):
        self.images: set[str] = set()
        self.pull_errors: list[str] = []
        self.pulls = 0
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, code, payload):
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = re.sub(r"^/v[0-9.]+", "", urlsplit(self.path).path)
                if path == "/_ping":
                    return self._send(200, "OK")
                if path == "/version":
                    return self._send(200, {"ApiVersion": "1.41", "Version": "20.10.24", "MinAPIVersion": "1.12"})
                match = re.match(r"^/images/(.+)/json$", path)
                if match and match.group(1) in engine.images:
                    return self._send(200, {"Id": "sha256:0", "Config": {"User": "1000:1000"}})
                return self._send(404, {"message": f"No such image: {match.group(1) if match else path}"})

            def do_POST(self):
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                engine.pulls += 1
                if engine.pull_errors:
                    error = engine.pull_errors.pop(0)
                    messages = [{"status": "Pulling"}, {"errorDetail": {"message": error}, "error": error}]
                else:
                    engine.images.add(f"{query['fromImage']}:{query.get('tag', 'latest')}")
                    messages = [{"status": "Pulling"}, {"status": "Download complete"}]
                self.send_response(200)  # a pull answers with a chunked stream of JSON messages
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for message in messages:
                    data = json.dumps(message).encode() + b"\r\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.client = DockerLauncherHook(docker_url="tcp://%s:%d" % self.server.server_address[:2],
                                         docker_conn_id="").client

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry():
    fake = FakeRegistryEngine()
    yield fake
    fake.close()


def test_a_registry_rate_limit_is_waited_out_then_the_image_pulled(registry):
    registry.pull_errors = ["toomanyrequests: You have reached your pull rate limit"] * 2
    lines: list[str] = []
    assert docker_engine.ensure_image(registry.client, IMAGE, 30, lines.append) is None
    assert registry.pulls == 3 and IMAGE in registry.images
    assert sum("the registry refuses to serve" in line for line in lines) == 1  # said once, not per retry


def test_a_registry_that_keeps_rate_limiting_fails_as_an_image_error_after_the_grace(registry):
    registry.pull_errors = ["toomanyrequests: You have reached your pull rate limit"] * 100
    result = docker_engine.ensure_image(registry.client, IMAGE, 1.5, lambda line: None)
    assert result.failure_class == IMAGE_ERROR and "still rate-limited after 1 s" in result.failure_reason


def test_a_definite_refusal_is_not_retried(registry):
    registry.pull_errors = ["manifest for registry.example.com/training-runtime:1.0 not found: manifest unknown"]
    result = docker_engine.ensure_image(registry.client, IMAGE, 30, lambda line: None)
    assert result.failure_class == IMAGE_ERROR and "manifest unknown" in result.failure_reason
    assert registry.pulls == 1


class ScriptedEngine:
    """Containers whose states follow a script, one step per poll; start() of an exited container runs it again."""

    def __init__(self, script: dict[str, list[dict]]):
        self.script = {name: list(states) for name, states in script.items()}
        self.started: list[str] = []
        self.stopped: list[str] = []

    def inspect_container(self, name):
        states = self.script[name]
        state = states.pop(0) if len(states) > 1 else states[0]
        return {"State": state}

    def start(self, name):
        self.started.append(name)

    def stop(self, name, timeout=None):
        self.stopped.append(name)
        self.script[name] = [{"Running": False, "ExitCode": 143}]


RUNNING = {"Running": True, "ExitCode": 0}
DONE = {"Running": False, "ExitCode": 0}


def _waited(tmp_path, script, elastic):
    hook = DockerLauncherHook(docker_url="tcp://127.0.0.1:1")
    hook.__dict__["client"] = engine = ScriptedEngine(script)
    lines: list[str] = []
    restarted: list[str] = []
    request = make_request(tmp_path, instance_count=2, hosts=("j-0", "j-1"), elastic=elastic)
    states, timed_out = hook._wait(request, ["j-0", "j-1"], {"poll_interval": 0, "stop_timeout": 1}, 0.0,
                                   lines.append, restarted.append)
    return engine, lines, restarted, states


def test_an_elastic_job_s_killed_container_is_started_again_and_the_job_goes_on(tmp_path):
    killed = {"Running": False, "ExitCode": 137, "OOMKilled": False}
    engine, lines, restarted, states = _waited(tmp_path, {
        "j-0": [RUNNING, RUNNING, RUNNING, RUNNING, DONE],
        "j-1": [RUNNING, killed, RUNNING, RUNNING, DONE],
    }, {"min_hosts": 2, "max_hosts": 2, "max_restarts": 2})
    assert engine.started == ["j-1"] and restarted == ["j-1"] and engine.stopped == []
    assert lines == ["[docker] elastic: j-1 lost (exit code 137); starting its container again",
                     "[docker] elastic: j-1 restarted (restart 1 of this host, at most 2); the group re-forms with it "
                     "and resumes from the last checkpoint"]
    assert all(state["ExitCode"] == 0 for state in states.values())


@pytest.mark.parametrize("code", [1, 2, 3, 5])
def test_a_user_error_or_the_time_limit_is_not_restarted(tmp_path, code):
    engine, lines, restarted, _ = _waited(tmp_path, {
        "j-0": [RUNNING], "j-1": [RUNNING, {"Running": False, "ExitCode": code}]},
        {"min_hosts": 2, "max_hosts": 2, "max_restarts": 2})
    assert engine.started == [] and engine.stopped == ["j-0"]
    assert lines == ["[docker] j-1 failed; stopping the other hosts"]


def test_restarts_are_bounded_per_host_and_without_elastic_there_are_none(tmp_path):
    killed = {"Running": False, "ExitCode": 137}
    engine, lines, _, _ = _waited(tmp_path, {"j-0": [RUNNING], "j-1": [RUNNING, killed, killed, killed]},
                                  {"min_hosts": 2, "max_hosts": 2, "max_restarts": 1})
    assert engine.started == ["j-1"] and engine.stopped == ["j-0"]
    assert "[docker] elastic: j-1 lost again (exit code 137) after 1 restart(s): max_restarts is used up" in lines
    static, lines, _, _ = _waited(tmp_path, {"j-0": [RUNNING], "j-1": [RUNNING, killed]}, None)
    assert static.started == [] and static.stopped == ["j-0"]


def test_an_elastic_job_s_result_names_the_hosts_started_again(tmp_path):
    from operators.launch.base import LaunchRequest
    from operators.launch.docker.engine import job_result

    request = LaunchRequest(job_name="el", job_root=str(tmp_path), workspace=str(tmp_path), layout="ti",
                            instance_count=2, hosts=("el-0", "el-1"))
    done = {"el-0": {"ExitCode": 0, "Status": "exited"}, "el-1": {"ExitCode": 0, "Status": "exited"}}
    assert job_result(request, done, False, {"el-1": 1}).restarts == {"el-1": 1}
    assert job_result(request, done, False).restarts == {}

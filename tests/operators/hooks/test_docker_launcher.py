"""The Docker launcher: the container bodies it builds (pure), and its lifecycle with the real docker client
(through the docker provider's DockerHook) against a tiny fake Docker Engine API on loopback."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from operators.hooks.docker_launcher import DockerLauncherHook, container_configs
from operators.hooks.launcher import IMAGE_ERROR, OOM, TIMEOUT, USER_ERROR, LaunchRequest

IMAGE = "registry.example.com/training-runtime:1.0"


# ---- a tiny Docker Engine -------------------------------------------------------------------------------
class FakeDocker:
    """Just the Engine API the launcher uses; containers are driven by the test (log, exit)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.images: set[str] = set()
        self.pull_errors: list[str] = []  # answers of the next pulls, then success
        self.containers: dict[str, dict] = {}
        self.networks: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self._last_ts = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _docker_handler(self))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self):
        return "tcp://%s:%d" % self.server.server_address[:2]

    def stop(self):
        with self.cond:
            for c in self.containers.values():
                c["State"].update(Running=False, Status="exited")
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def _ts(self):
        self._last_ts = max(self._last_ts + 1, time.time_ns())
        return self._last_ts

    def _get(self, ref):
        for c in self.containers.values():
            if ref in (c["Id"], c["Name"].lstrip("/")):
                return c
        raise KeyError(ref)

    # driving
    def log(self, name, *lines):
        with self.cond:
            self._get(name)["logs"].extend((self._ts(), line, True) for line in lines)
            self.cond.notify_all()

    def exit(self, name, code, oom=False, last_lines=()):
        with self.cond:
            c = self._get(name)
            c["logs"].extend((self._ts(), line, False) for line in last_lines)
            c["State"].update(
                Status="exited", Running=False, ExitCode=code, OOMKilled=oom,
                FinishedAt=time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            )
            self.cond.notify_all()

    def running(self):
        with self.cond:
            return sorted(n.lstrip("/") for n, c in ((c["Name"], c) for c in self.containers.values()) if c["State"]["Running"])

    def count(self, method, pattern):
        return sum(1 for m, p in self.requests if m == method and re.search(pattern, p))

    # the API: returns (status, json payload) or streams itself
    def handle(self, handler, method, path, query, body):
        path = re.sub(r"^/v[0-9.]+", "", path)
        with self.cond:
            if path == "/_ping":
                return 200, "OK"
            if path == "/version":
                return 200, {"ApiVersion": "1.45", "Version": "26.1.0", "MinAPIVersion": "1.24"}
            if path == "/networks" and method == "GET":
                names = json.loads(query.get("filters", "{}")).get("name", [])
                return 200, [n for n in self.networks.values() if not names or n["Name"] in names]
            if path == "/networks/create":
                if body["Name"] in self.networks:
                    return 409, {"message": f"network with name {body['Name']} already exists"}
                self.networks[body["Name"]] = {"Id": uuid.uuid4().hex, "Name": body["Name"], "Labels": body.get("Labels")}
                return 201, {"Id": self.networks[body["Name"]]["Id"]}
            match = re.match(r"^/networks/([^/]+)$", path)
            if match and method == "DELETE":
                for name, net in list(self.networks.items()):
                    if match.group(1) in (net["Id"], name):
                        del self.networks[name]
                        return 204, None
                return 404, {"message": "network not found"}
            if path == "/containers/json":
                labels = json.loads(query.get("filters", "{}")).get("label", [])
                found = [
                    {"Id": c["Id"], "Names": [c["Name"]], "State": c["State"]["Status"], "Labels": c["Config"]["Labels"]}
                    for c in self.containers.values()
                    if all(lab in {f"{k}={v}" for k, v in c["Config"]["Labels"].items()} for lab in labels)
                ]
                return 200, found
            if path == "/containers/create":
                name = query["name"]
                if body["Image"] not in self.images:
                    return 404, {"message": f"No such image: {body['Image']}"}
                if any(c["Name"] == "/" + name for c in self.containers.values()):
                    return 409, {"message": f'Conflict. The container name "/{name}" is already in use'}
                if body["HostConfig"]["NetworkMode"] not in self.networks:
                    return 404, {"message": f"network {body['HostConfig']['NetworkMode']} not found"}
                cid = uuid.uuid4().hex
                self.containers[cid] = {
                    "Id": cid,
                    "Name": "/" + name,
                    "Config": {**body, "Tty": False},
                    "HostConfig": body["HostConfig"],
                    "State": {"Status": "created", "Running": False, "ExitCode": 0, "OOMKilled": False, "FinishedAt": ""},
                    "logs": [],
                }
                return 201, {"Id": cid, "Warnings": []}
            if path == "/images/create":
                handler.stream_json(self._pull(query))
                return None
            match = re.match(r"^/containers/([^/]+)(/[a-z]+)?$", path)
            if match:
                try:
                    c = self._get(match.group(1))
                except KeyError:
                    return 404, {"message": f"No such container: {match.group(1)}"}
                action = match.group(2)
                if action == "/json":
                    return 200, {k: v for k, v in c.items() if k != "logs"}
                if action == "/start":
                    c["State"].update(Status="running", Running=True)
                    return 204, None
                if action == "/stop":
                    if c["State"]["Running"]:
                        c["State"].update(Status="exited", Running=False, ExitCode=143)
                        self.cond.notify_all()
                    return 204, None
                if action is None and method == "DELETE":
                    del self.containers[c["Id"]]
                    self.cond.notify_all()
                    return 204, None
                if action == "/logs":
                    stream_args = (c, query)
        handler.stream_logs(self, *stream_args)
        return None

    def _pull(self, query):
        if self.pull_errors:
            error = self.pull_errors.pop(0)
            return [{"status": "Pulling from training-runtime"}, {"errorDetail": {"message": error}, "error": error}]
        self.images.add(f"{query['fromImage']}:{query.get('tag', 'latest')}")
        return [{"status": "Pulling from training-runtime"}, {"status": "Download complete"}]


def _docker_handler(engine: FakeDocker):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _dispatch(self, method):
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            engine.requests.append((method, re.sub(r"^/v[0-9.]+", "", parts.path)))
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            answer = engine.handle(self, method, parts.path, query, body)
            if answer is None:
                return
            code, payload = answer
            data = b"" if payload is None else (payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _chunk(self, data: bytes):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _start_chunked(self, content_type):
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def stream_json(self, messages):
            self._start_chunked("application/json")
            for message in messages:
                self._chunk(json.dumps(message).encode() + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

        def stream_logs(self, engine, container, query):
            timestamps, follow = query.get("timestamps") == "1", query.get("follow") == "1"
            since_ns = int(float(query.get("since", 0)) * 1e9)

            def frame(ts, line):
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts // 10**9)) + f".{ts % 10**9:09d}Z "
                payload = ((stamp if timestamps else "") + line + "\n").encode()
                return b"\x01\x00\x00\x00" + len(payload).to_bytes(4, "big") + payload

            self._start_chunked("application/vnd.docker.raw-stream")
            position = 0
            try:
                while True:
                    with engine.cond:
                        logs = container["logs"]
                        fresh = [entry for entry in logs[position:] if entry[0] >= since_ns]
                        running = container["State"]["Running"] and container["Id"] in engine.containers
                        if follow:
                            visible = []
                            for entry in logs[position:]:
                                if not entry[2]:
                                    break
                                visible.append(entry)
                            position += len(visible)
                            fresh = [entry for entry in visible if entry[0] >= since_ns]
                        else:
                            position = len(logs)
                        if follow and not fresh and running:
                            engine.cond.wait(0.1)
                            continue
                    if fresh:
                        self._chunk(b"".join(frame(ts, line) for ts, line, _ in fresh))
                    if not follow or not running:
                        break
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass

        def do_GET(self):
            self._dispatch("GET")

        def do_POST(self):
            self._dispatch("POST")

        def do_DELETE(self):
            self._dispatch("DELETE")

    return Handler


# ---- fixtures -------------------------------------------------------------------------------------------
@pytest.fixture
def engine():
    fake = FakeDocker()
    yield fake
    fake.stop()


def make_request(tmp_path: Path, job_name="cifar-train", hosts=1, layout="ti", gpu=0, **overrides) -> LaunchRequest:
    workspace = tmp_path / "workspace"
    job_root = workspace / "jobs" / job_name
    (job_root / "output").mkdir(parents=True, exist_ok=True)
    (workspace / "cache" / "ab12").mkdir(parents=True, exist_ok=True)
    values = dict(
        job_name=job_name,
        job_root=str(job_root),
        workspace=str(workspace),
        layout=layout,
        instance_count=hosts,
        hosts=tuple(f"{job_name}-{i}" for i in range(hosts)),
        channel_entries={"train": str(workspace / "cache" / "ab12")},
        image_uri=IMAGE,
        resources={"cpu": "1500m", "memory": "16Gi", "gpu": gpu},
        max_run_seconds=3600,
        env={"TM_LOG_LEVEL": "INFO"},
        options={"poll_interval": 0.05, "image_pull_grace_seconds": 5},
    )
    values.update(overrides)
    return LaunchRequest(**values)


def launch(engine, request, lines):
    """hook.run() on a worker thread (it blocks, as in a task); returns the thread and where its result lands."""
    results = []
    hook = DockerLauncherHook(docker_url=engine.url, docker_conn_id="")
    worker = threading.Thread(target=lambda: results.append(hook.run(request, lines.append)), daemon=True)
    worker.start()
    return hook, worker, results


def until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


# ---- the container bodies (pure) ------------------------------------------------------------------------
@pytest.mark.parametrize("hosts", [1, 4])
@pytest.mark.parametrize(
    ("layout", "root"),
    [("ti", "/opt/ml"), ("sagemaker", "/opt/ml"), ("pai", "/ml"), ("modelarts", "/home/ma-user/modelarts")],
)
def test_one_container_per_host_with_the_job_root_and_read_only_cache(tmp_path, hosts, layout, root):
    request = make_request(tmp_path, hosts=hosts, layout=layout, gpu=2)
    configs = container_configs(request, image=IMAGE, user="50000:0")
    hook = DockerLauncherHook(docker_url="tcp://127.0.0.1:1")
    assert [c["name"] for c in configs] == hook.hosts(request.job_name, hosts) == [f"cifar-train-{i}" for i in range(hosts)]
    for index, config in enumerate(configs):
        name = f"cifar-train-{index}"
        assert config["Cmd"] == ["train", "--root", root, "--current-host", name]
        assert config["Hostname"] == name and config["User"] == "50000:0"
        assert config["NetworkingConfig"] == {"EndpointsConfig": {"cifar-train": {"Aliases": [name]}}}
        host = config["HostConfig"]
        assert host["NetworkMode"] == "cifar-train"
        assert host["Binds"] == [
            f"{request.job_root}:{root}:rw",
            f"{request.channel_entries['train']}:{root}/input/data/train:ro",
        ]
        assert host["Memory"] == 16 * 2**30 and host["NanoCpus"] == 1_500_000_000
        assert host["DeviceRequests"] == [{"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]
        assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges:true"]
        assert config["Labels"]["airflow-training-jobs/host-index"] == str(index)
        assert "TRAINING_ROOT=" + root in config["Env"]


def test_container_bodies_refuse_credentials_and_translate_host_paths(tmp_path):
    request = make_request(tmp_path, env={"AWS_SECRET_ACCESS_KEY": "abc/def+ghi"})
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY looks like a credential") as err:
        container_configs(request, image=IMAGE, user="1000:1000")
    assert "abc/def+ghi" not in str(err.value)
    request = make_request(tmp_path)
    request = LaunchRequest.from_dict(
        {**request.to_dict(), "env": {"TRAINING_METRICS_FILE": f"{request.job_root}/output/metrics.jsonl"}}
    )
    config = container_configs(request, image=IMAGE, user="1000:1000", host_workspace="/srv/airflow/workspace")[0]
    assert config["HostConfig"]["Binds"][0] == "/srv/airflow/workspace/jobs/cifar-train:/opt/ml:rw"
    assert "TRAINING_METRICS_FILE=/opt/ml/output/metrics.jsonl" in config["Env"]
    with pytest.raises(ValueError, match="resources.memory is 'lots'"):
        container_configs(make_request(tmp_path, resources={"memory": "lots"}), image=IMAGE, user="1")


# ---- the lifecycle against the fake engine --------------------------------------------------------------
def test_run_pulls_starts_streams_and_cleans_up(engine, tmp_path):
    engine.pull_errors = ["toomanyrequests: You have reached your pull rate limit"]  # waited out
    request = make_request(tmp_path, hosts=2)
    lines: list[str] = []
    _, worker, results = launch(engine, request, lines)
    until(lambda: len(engine.running()) == 2)
    for index in range(2):
        engine.log(f"cifar-train-{index}", *(f"host {index} step {s}" for s in range(20)))
    until(lambda: "[cifar-train-1] host 1 step 19" in lines and "[cifar-train-0] host 0 step 19" in lines)
    for index in range(2):
        engine.exit(f"cifar-train-{index}", 0, last_lines=(f"host {index} model saved",))
    worker.join(15)
    assert results and results[0].succeeded
    for index in range(2):
        got = [line for line in lines if line.startswith(f"[cifar-train-{index}]")]
        assert got == [f"[cifar-train-{index}] host {index} step {s}" for s in range(20)] + [
            f"[cifar-train-{index}] host {index} model saved"
        ]
    assert any("the registry refuses to serve" in line for line in lines)
    assert engine.count("POST", "/images/create") == 2
    assert not engine.containers and not engine.networks  # nothing left behind


def test_a_failed_host_stops_the_others_and_reports_the_user_error(engine, tmp_path):
    engine.images.add(IMAGE)
    request = make_request(tmp_path, hosts=2)
    lines: list[str] = []
    _, worker, results = launch(engine, request, lines)
    until(lambda: len(engine.running()) == 2)
    Path(request.job_root, "output", "failure").write_text("ZeroDivisionError: division by zero")
    engine.exit("cifar-train-0", 1)
    worker.join(15)
    result = results[0]
    assert (result.failure_class, result.exit_code, result.retryable) == (USER_ERROR, 1, False)
    assert result.failure_reason == "the training code failed on cifar-train-0, exit code 1: ZeroDivisionError: division by zero"
    assert engine.count("POST", "/containers/cifar-train-1/stop") == 1


def test_oom_is_read_from_the_container_state(engine, tmp_path):
    engine.images.add(IMAGE)
    request = make_request(tmp_path)
    _, worker, results = launch(engine, request, [])
    until(lambda: engine.running())
    engine.exit("cifar-train-0", 137, oom=True)
    worker.join(15)
    assert results[0].failure_class == OOM and "resources.memory" in results[0].failure_reason


def test_kubernetes_options_in_the_same_spec_are_ignored_unknown_ones_refused(tmp_path):
    hook = DockerLauncherHook(docker_url="tcp://127.0.0.1:1")
    assert hook.configs(make_request(tmp_path, options={"namespace": "ml", "node_selector": {"a": "b"}}))
    with pytest.raises(ValueError, match="docker option 'nodeSelector' is not a known option"):
        hook.configs(make_request(tmp_path, options={"nodeSelector": {}}))


def test_a_missing_image_fails_fast(engine, tmp_path):
    engine.pull_errors = ["manifest for registry.example.com/training-runtime:1.0 not found: manifest unknown"]
    _, worker, results = launch(engine, make_request(tmp_path), [])
    worker.join(15)
    assert results[0].failure_class == IMAGE_ERROR and "manifest unknown" in results[0].failure_reason
    assert not engine.containers and not engine.networks


def test_max_run_seconds_stops_the_job(engine, tmp_path):
    engine.images.add(IMAGE)
    _, worker, results = launch(engine, make_request(tmp_path, max_run_seconds=1), [])
    worker.join(15)
    assert results[0].failure_class == TIMEOUT and not engine.containers


def test_a_retry_reattaches_to_running_containers(engine, tmp_path):
    engine.images.add(IMAGE)
    request = make_request(tmp_path, hosts=2)
    first_lines: list[str] = []
    # The worker that will "die" (it lives on in this test: keep_containers stops it from removing them).
    keep = LaunchRequest.from_dict({**request.to_dict(), "options": {**request.options, "keep_containers": True}})
    _, first, first_results = launch(engine, keep, first_lines)
    until(lambda: len(engine.running()) == 2)
    engine.log("cifar-train-0", "epoch 1")
    second_lines: list[str] = []
    _, second, second_results = launch(engine, request, second_lines)  # the retry on another worker
    until(lambda: any("reattaching" in line for line in second_lines))
    assert engine.count("POST", "/containers/create") == 2  # no second set
    for index in range(2):
        engine.exit(f"cifar-train-{index}", 0)
    second.join(15)
    first.join(15)
    assert second_results[0].succeeded
    assert "[cifar-train-0] epoch 1" in second_lines  # the retry shows the whole log


def test_stop_removes_containers_and_network(engine, tmp_path):
    engine.images.add(IMAGE)
    request = make_request(tmp_path, hosts=2)
    hook, worker, results = launch(engine, request, [])
    until(lambda: len(engine.running()) == 2)
    hook.stop(request)
    worker.join(15)
    assert not engine.containers and not engine.networks
    assert results and not results[0].succeeded and "were removed while the job ran" in results[0].failure_reason

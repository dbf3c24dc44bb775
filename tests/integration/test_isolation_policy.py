"""Through the served Airflow's REST API, as a `User`-role account (may trigger) and a `Viewer` (may read): spec
options that would weaken isolation are refused in the first task, the view serves nothing a refused spec names,
the plugin apps' API docs need a login, and the SDK's code upload needs an existing DAG, keeps to a per-user quota
and is no other user's source_dir. Every refusal is asserted as the one line a person reads."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest
from airflow_server import Api, airflow_deployment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PASSWORDS = {"admin": "admin-password-of-the-test-server", "alice": "alice-user-password",
             "victor": "victor-viewer-password"}
QUOTA = 6000  # bytes of staged code per user


@pytest.fixture(scope="module")
def server(tmp_path_factory, postgres_server):
    secrets = tmp_path_factory.mktemp("isolation-passwords") / "passwords.json"
    secrets.write_text(json.dumps(PASSWORDS))
    env = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,alice:user,victor:viewer",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(secrets),
           "AIRFLOW__TRAINING__SDK_CODE_QUOTA_BYTES": str(QUOTA)}
    with airflow_deployment(tmp_path_factory, postgres_server, extra_env=env, name="isolation-server") as server:
        yield server


def client(server, user: str | None) -> Api:
    api = Api(server.base_url)
    if user:
        api.login(user, PASSWORDS[user])
    return api


def code_archive(text: str, padding: int = 0) -> tuple[bytes, str]:
    """A packed source_dir (train.py, and `padding` bytes that do not compress)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("train.py", text.encode()), ("weights.bin", os.urandom(padding))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    body = buffer.getvalue()
    return body, hashlib.sha256(body).hexdigest()


def upload(api: Api, body: bytes, sha: str, dag_id: str = "training_job") -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{api.base}/training-sdk/code/{sha}.tar.gz?dag_id={dag_id}", data=body,
                                     method="PUT", headers={"Authorization": f"Bearer {api.token}",
                                                            "Content-Type": "application/gzip"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def trigger(server, api: Api, run_id: str, conf: dict) -> None:
    status, run = api.call("POST", "/api/v2/dags/training_job/dagRuns",
                           {"logical_date": None, "conf": conf, "dag_run_id": run_id})
    assert status == 200, run


def refusal(server, run_id: str) -> str:
    """The run failed in its first task: that task's one `invalid job spec:` line."""
    assert server.wait_for_run("training_job", run_id)["state"] == "failed"
    states = server.task_states("training_job", run_id)
    assert states[("validate_spec", -1)] == "failed" and states[("stage_code", -1)] == "upstream_failed", states
    _, log = server.api.call(
        "GET", f"/api/v2/dags/training_job/dagRuns/{run_id}/taskInstances/validate_spec/logs/1?full_content=true")
    lines = [line for text in _strings(log) for line in text.splitlines() if "invalid job spec: " in line]
    assert lines, json.dumps(log)[-3000:]
    return lines[0][lines[0].index("invalid job spec: ") + len("invalid job spec: "):]


def _strings(value):
    """Every string in a JSON answer (a task log's events and their error details)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def job_conf(tmp_path, job_name: str, **extra) -> dict:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('never runs')\n")
    return {"job_name": job_name, "source_dir": str(code), "entry_point": "train.py",
            "output_path": str(tmp_path / "models"), "image_uri": "training-base:latest", **extra}


def test_api_docs_of_the_plugin_apps_need_a_login(server):
    anonymous, viewer = client(server, None), client(server, "victor")
    for path in ("/training-jobs/openapi.json", "/training-jobs/docs", "/training-sdk/openapi.json",
                 "/training-sdk/docs"):
        status, body = anonymous.call("GET", path)
        assert status == 401, (path, body)
        assert viewer.raw("GET", path)[0] == 200, path
    status, schema = viewer.call("GET", "/training-jobs/openapi.json")
    assert "/api/jobs" in schema["paths"]


def test_isolation_weakening_spec_options_are_refused_in_the_first_task(server, tmp_path):
    alice = client(server, "alice")
    cases = {
        "iso-root-user": ({"backend": "docker", "docker": {"user": "00"}},
                          'docker.user: is "00", whose user is root: training containers never run as root'),
        "iso-host-path": ({"backend": "docker", "docker": {"host_workspace": "/"}},
                          "docker.host_workspace: is an admin setting (what the Docker engine bind-mounts): remove "
                          "it from the spec; an admin sets [training.docker] host_workspace in airflow.cfg"),
        "iso-namespace": ({"backend": "kubernetes", "kubernetes": {"namespace": "kube-system"}},
                          "kubernetes.namespace: is 'kube-system', but the 'default' profile sets 'training'; leave "
                          "it out, or name an admin-defined profile in kubernetes.profile (profiles: default)"),
        "iso-service-account": ({"backend": "kubernetes", "kubernetes": {"service_account": "cluster-admin"}},
                                "kubernetes.service_account: is 'cluster-admin', but the 'default' profile sets ''"),
    }
    for run_id, (extra, _) in cases.items():
        trigger(server, alice, run_id, job_conf(tmp_path, run_id, **extra))
    for run_id, (_, expected) in cases.items():
        line = refusal(server, run_id)
        assert line.startswith(expected), line
        assert "Traceback" not in line


def test_the_view_serves_nothing_a_refused_spec_names(server, tmp_path):
    # Another DAG's job left its model here; a refused run names the same output_path and job_name.
    victim = tmp_path / "models" / "other-dags-job" / "output"
    victim.mkdir(parents=True)
    (victim / "model.tar.gz").write_bytes(b"another DAG's model")
    (victim / "failure").write_text("another DAG's failure reason")
    alice, viewer = client(server, "alice"), client(server, "victor")
    conf = job_conf(tmp_path, "other-dags-job", backend="docker", docker={"user": "root"})
    trigger(server, alice, "iso-unvalidated", conf)
    assert refusal(server, "iso-unvalidated").startswith("docker.user: ")
    base = "/training-jobs/api/jobs/training_job/iso-unvalidated/-1"
    for name in ("model.tar.gz", "failure"):
        status, body = viewer.call("GET", f"{base}/artifacts/{name}")
        assert status == 409, (name, body)
        assert body["detail"] == ("the job's spec was not validated (validate_spec failed or has not run yet), so the "
                                  "view serves nothing it names; fix the spec and trigger the DAG again")
    status, job = viewer.call("GET", base)
    assert status == 200 and job["validated"] is False and job["job_name"] == "other-dags-job"
    assert job["artifacts"] == [] and job["output_uri"] is None
    # The page says why the job ended (validate_spec's refusal, from its XCom), never the other job's failure file.
    assert job["failure"].startswith("invalid job spec: docker.user: ") and "another DAG" not in job["failure"]


def test_code_uploads_need_an_existing_dag_keep_to_a_quota_and_are_their_users_own(server, tmp_path):
    alice, admin = client(server, "alice"), client(server, "admin")
    body, sha = code_archive("print('alice')\n")
    status, answer = upload(alice, body, sha, dag_id="no_such_dag")
    assert status == 404 and answer["detail"] == ("DAG 'no_such_dag' does not exist; upload code for the DAG you will "
                                                  "trigger (dag_id=...)")
    status, mine = upload(alice, body, sha)
    assert status == 200 and "/staging/code/alice/" in mine["source_dir"], mine
    big, big_sha = code_archive("print('big')\n", padding=QUOTA)
    status, answer = upload(alice, big, big_sha)
    assert status == 413 and answer["detail"].startswith(f"your staged code would pass your quota of {QUOTA} bytes "
                                                         "([training] sdk_code_quota_bytes;"), answer
    # the admin's uploaded code is not alice's source_dir
    body, sha = code_archive("print('admin')\n")
    status, theirs = upload(admin, body, sha)
    assert status == 200 and "/staging/code/admin/" in theirs["source_dir"], theirs
    conf = {**job_conf(tmp_path, "iso-borrowed-code"), "source_dir": theirs["source_dir"]}
    trigger(server, alice, "iso-borrowed-code", conf)
    line = refusal(server, "iso-borrowed-code")
    assert line == (f"source_dir: {theirs['source_dir']} is code another user uploaded (or was staged without a "
                    "triggering user); upload your own with the SDK, or name object storage or a path under "
                    "local_roots"), line

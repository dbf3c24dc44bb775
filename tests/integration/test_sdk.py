"""The SDK and the CLI against a real Airflow (api-server, scheduler, dag-processor, triggerer: the fixture of
tests/integration/airflow_server.py) with real local source dirs: fit() end to end with the log streamed while the
job runs, a failing job's reason, a spec refused before upload, attach + stop, the CLI, a tuner with three trials;
and the SDK guide's examples (docs/sdk.md) run as written, from a directory laid out like the repository after
`make demo`, finding the credentials the way `make airflow` leaves them (simple_auth_manager_passwords.json.generated
in the current directory; only the URL differs: a free port). One module, so every test shares one Airflow (about a minute to start)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from training_sdk import (
    CategoricalParameter,
    Estimator,
    HyperparameterTuner,
    Session,
    SpecValidationError,
    TrainingJob,
    TrainingJobError,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # its own waits go up to 600 s, each with its own message
REPO = Path(__file__).resolve().parents[2]
LOSS = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]

# Prints a line, then waits for the test to acknowledge it (the test writes `ack` into the job root when the line
# reaches the client; the local sandbox shows the script only its job root, and no port of the worker): the job can
# only finish if its log is streamed while it runs, not fetched at the end.
HANDSHAKE_SCRIPT = textwrap.dedent('''
    import argparse, os, sys, time
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); p.add_argument("--epochs", type=int)
    a = p.parse_args()
    print("waiting-for-ack", flush=True)
    ack = os.path.join(os.environ["SM_MODEL_DIR"], os.pardir, "ack")
    deadline = time.time() + 90
    while not os.path.exists(ack):
        if time.time() > deadline:
            sys.exit("the client never saw waiting-for-ack while the job ran")
        time.sleep(0.2)
    assert not os.path.exists("data"), "data/ should have been left out by .trainingignore"
    for epoch in range(a.epochs):
        print(f"epoch={epoch} loss={a.lr / (epoch + 1):.4f}", flush=True)
    open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w").write(f"lr={a.lr}")
''')

TRAIN_SCRIPT = textwrap.dedent('''
    import argparse, os
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float, default=0.5); p.add_argument("--epochs", type=int)
    a = p.parse_args()
    for epoch in range(a.epochs):
        print(f"epoch={epoch} loss={abs(a.lr - 0.2) + 0.1 / (epoch + 1):.4f}", flush=True)
    open(os.path.join(os.environ["TM_MODEL_DIR"], "lr.txt"), "w").write(str(a.lr))
''')

FAILING_SCRIPT = 'print("loading data", flush=True)\nraise ValueError("learning rate must be positive")\n'

SLOW_SCRIPT = textwrap.dedent('''
    import time
    for step in range(600):
        print(f"step={step}", flush=True)
        time.sleep(0.5)
''')


def code_dir(tmp_path: Path, script: str, name: str = "src") -> Path:
    code = tmp_path / name
    (code / "data").mkdir(parents=True)
    (code / "train.py").write_text(script)
    (code / "data" / "train.csv").write_text("1,2\n")
    (code / ".trainingignore").write_text("data/\n")
    return code


@pytest.fixture
def session(airflow_server):
    return Session(api_url=airflow_server.base_url, password=airflow_server.password)


class Acknowledger(io.TextIOBase):
    """stdout while fit() streams: records every line and writes `ack` into the job roots named `<prefix>*` when the
    script's line arrives."""

    def __init__(self, jobs_dir: Path, prefix: str):
        self.jobs_dir, self.prefix, self.lines, self.acked = jobs_dir, prefix, [], []

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.lines.append(line)
            if line == "waiting-for-ack" and not self.acked:
                for root in self.jobs_dir.glob(f"{self.prefix}*"):
                    (root / "ack").write_text("seen\n")
                    self.acked.append(root.name)
        return len(text)


def test_fit_streams_the_log_while_the_job_runs_and_returns_the_model(session, tmp_path, monkeypatch, airflow_server):
    est = Estimator(entry_point="train.py", source_dir=str(code_dir(tmp_path, HANDSHAKE_SCRIPT)), layout="sagemaker",
                    hyperparameters={"lr": 0.4, "epochs": 3}, metric_definitions=LOSS,
                    base_job_name="sdk-fit", session=session)
    out = Acknowledger(Path(airflow_server.home, "workspace", "jobs"), "sdk-fit-")
    monkeypatch.setattr(sys, "stdout", out)
    try:
        job = est.fit()
    finally:
        monkeypatch.undo()

    assert out.acked == [job.job_name]
    assert out.lines.index("waiting-for-ack") < out.lines.index("epoch=2 loss=0.1333")
    assert job.status == "Completed" and job.job_name.startswith("sdk-fit-")
    model = est.model_data()
    assert model.endswith(f"/models/{job.job_name}/output/model.tar.gz")
    with tarfile.open(model) as tar:
        assert tar.extractfile("weights.txt").read() == b"lr=0.4"
    assert [p["value"] for p in job.metrics()["loss"]] == [0.4, 0.2, 0.1333]
    # the code went through the staging upload, content-addressed
    assert json.loads(json.dumps(job.describe()["conf"]))["source_dir"].endswith(".tar.gz")


def test_a_failing_job_raises_with_its_reason(session, tmp_path, capsys):
    est = Estimator(entry_point="train.py", source_dir=str(code_dir(tmp_path, FAILING_SCRIPT)), session=session,
                    base_job_name="sdk-fail")
    with pytest.raises(TrainingJobError, match="learning rate must be positive") as err:
        est.fit()
    captured = capsys.readouterr()
    assert "loading data" in captured.out  # the training's own lines on stdout ...
    assert "[training_sdk] launch_training: failed" in captured.err  # ... the stages' progress on stderr
    job = est.latest_job
    assert err.value.status == "Failed" and job.status == "Failed"
    assert "user_error" in err.value.reason
    assert job.model_data() is None


def test_a_bad_spec_is_refused_on_the_client_before_anything_is_uploaded(session, airflow_server, tmp_path):
    staging = Path(airflow_server.home, "workspace", "staging", "code")
    before = sorted(staging.rglob("*")) if staging.is_dir() else []
    runs = len(session.dag_runs("training_job", 100))
    est = Estimator(entry_point="train.py", source_dir=str(code_dir(tmp_path, TRAIN_SCRIPT)), instance_count=0,
                    session=session)
    with pytest.raises(SpecValidationError, match="'instance_count': 0 is less than the minimum of 1"):
        est.fit()
    assert (sorted(staging.rglob("*")) if staging.is_dir() else []) == before
    assert len(session.dag_runs("training_job", 100)) == runs


def test_attach_to_a_running_job_and_stop_it(session, tmp_path, airflow_server):
    # The script's own pid means nothing here (the local sandbox gives it a PID namespace): find the training's
    # processes by a marker in their environment, which /proc shows from outside the namespace.
    marker = os.urandom(8).hex()
    est = Estimator(entry_point="train.py", source_dir=str(code_dir(tmp_path, SLOW_SCRIPT)), session=session,
                    environment={"SDK_STOP_MARKER": marker}, base_job_name="sdk-stop")
    job = est.fit(wait=False)
    for line in job.stream_logs(timeout=180):
        if line == "step=2":
            break
    attached = Estimator.attach(job.job_name, session=session)
    assert attached.latest_job.status == "InProgress"
    assert attached.entry_point == "train.py" and attached.environment == {"SDK_STOP_MARKER": marker}

    done = cli(airflow_server, "stop", job.job_name)
    assert done.returncode == 0 and "stop requested" in done.stdout
    with pytest.raises(TrainingJobError, match=r"stopped: Stopped by admin at \d{4}-\d\d-\d\d "):
        attached.wait(logs=False)
    stopped = TrainingJob.attach(job.job_name, session=session)
    assert stopped.status == "Stopped"
    states = stopped.task_states()
    assert states["launch_training"] == "failed" and states["publish_model"] == "upstream_failed"
    deadline = time.monotonic() + 60
    while _marked(marker):  # Airflow kills the task; its on_kill stops the training's process tree
        assert time.monotonic() < deadline, f"training processes {_marked(marker)} still running a minute after stop"
        time.sleep(0.5)


def _marked(marker: str) -> list[int]:
    """Live (not zombie) processes whose environment holds SDK_STOP_MARKER=marker."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"SDK_STOP_MARKER={marker}".encode() in (proc / "environ").read_bytes() \
                    and (proc / "stat").read_text().split(")")[-1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def cli(server, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRAINING_API_URL": server.base_url, "TRAINING_API_PASSWORD": server.password,
           "PYTHONPATH": os.pathsep.join([str(REPO / "sdk"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "training_sdk", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def cli_job(airflow_server, tmp_path_factory):
    """A job the CLI submitted and waited for, with an input channel (a local directory of one object): (the
    submit's CompletedProcess, its job name, the channel's directory). The CLI test reads it; Reproduce reruns it."""
    tmp = tmp_path_factory.mktemp("cli-job")
    code = code_dir(tmp, TRAIN_SCRIPT)
    data = tmp / "channel-train"
    data.mkdir()
    (data / "rows.csv").write_text("1,2\n3,4\n")
    done = cli(airflow_server, "submit", "--entry-point", "train.py", "--source-dir", ".", "--hp", "epochs=2",
               "--hp", "lr=0.25", "--metric", "loss=loss=([0-9.]+)", "--base-job-name", "sdk-cli",
               "--input", f"train={data}/", "--wait", cwd=code)
    assert done.returncode == 0, done.stderr
    return done, done.stdout.strip().splitlines()[-1], data


def test_cli_submit_wait_then_status_list_and_logs(airflow_server, cli_job):
    done, job_name, _data = cli_job
    assert "epoch=1 loss=0.1000" in done.stdout
    assert job_name.startswith("sdk-cli-") and f"{job_name}/output/model.tar.gz" in done.stderr

    status = cli(airflow_server, "status", job_name)
    assert status.returncode == 0 and f"{job_name}: succeeded" in status.stdout and "model: " in status.stdout
    listing = cli(airflow_server, "list", "--limit", "50")
    assert any(line.split()[:2] == [job_name, "succeeded"] for line in listing.stdout.splitlines()), listing.stdout
    logs = cli(airflow_server, "logs", job_name)
    assert "epoch=0 loss=0.1500" in logs.stdout
    missing = cli(airflow_server, "status", "no-such-job")
    assert missing.returncode == 2 and "no training job 'no-such-job'" in missing.stderr


def _kept_lineage(server, job_name: str) -> dict:
    return json.loads(Path(server.home, "workspace", "state", job_name, "lineage.json").read_text())


def test_reproduce_trains_on_the_same_code_and_data_then_refuses_changed_data_naming_the_channel(
        airflow_server, cli_job, session):
    _done, job_name, data = cli_job
    original = _kept_lineage(airflow_server, job_name)
    run_id = TrainingJob.attach(job_name, session=session).run_id

    again = cli(airflow_server, "reproduce", "training_job", run_id, "--wait")
    assert again.returncode == 0, again.stderr
    reproduction = again.stdout.splitlines()[0]  # the new run's id, printed before its log
    assert reproduction != job_name and "epoch=1 loss=0.1000" in again.stdout
    record = _kept_lineage(airflow_server, reproduction)
    assert record["reproduces"]["job_name"] == job_name and record["reproduces"]["run_id"] == run_id
    assert record["code"]["digest"] == original["code"]["digest"] and record["code"]["digest"].startswith("sha256:")
    assert record["channels"]["train"]["data_version"] == original["channels"]["train"]["data_version"]
    assert record["hyperparameters"] == original["hyperparameters"] == {"epochs": 2, "lr": 0.25}

    cache = Path(airflow_server.home, "workspace", "cache")
    entries = sorted(p.name for p in cache.iterdir())
    (data / "rows.csv").write_text("1,2\n3,5\n")  # one object of the channel changed since
    refused = cli(airflow_server, "reproduce", "training_job", run_id)
    assert refused.returncode == 0, refused.stderr
    job = TrainingJob(refused.stdout.strip().splitlines()[-1], session=session)
    with pytest.raises(TrainingJobError):
        job.wait(logs=False, timeout=300)
    reason = job.failure_reason() or ""
    assert f"channel train: the data at {data}/ changed since job {job_name}" in reason, reason
    assert "set reproduces.allow_changed_data to train on the new data" in reason and "\n" not in reason.strip()
    assert job.task_states()["launch_training"] != "success"
    assert sorted(p.name for p in cache.iterdir()) == entries  # nothing of the changed channel was downloaded


def test_the_cli_names_a_rest_triggered_job_as_the_view_does_and_stops_it(airflow_server, tmp_path):
    """A job triggered without the SDK has an Airflow run id (manual__...): the CLI takes the name the view shows."""
    code = code_dir(tmp_path, SLOW_SCRIPT)
    run = airflow_server.trigger("training_job", {"base_job_name": "rest-named", "source_dir": str(code),
                                                  "entry_point": "train.py", "output_path": str(tmp_path / "models")})
    assert run["dag_run_id"].startswith("manual__")
    deadline = time.monotonic() + 300
    while True:  # the view knows the name once validate_spec ran; wait for the training itself
        _, row = airflow_server.api.call("GET", f"/training-jobs/api/jobs/training_job/{quote(run['dag_run_id'])}/-1")
        launch = next((st for st in row.get("stages") or [] if st["stage"] == "launch_training"), {})
        if launch.get("state") == "running":
            break
        assert time.monotonic() < deadline, f"job of {run['dag_run_id']} not training after 300 s: {row}"
        time.sleep(1)
    name = row["job_name"]
    assert name.startswith("rest-named-")
    status = cli(airflow_server, "status", name)
    assert status.returncode == 0 and f"{name}: running" in status.stdout, status.stdout + status.stderr
    listing = cli(airflow_server, "list")
    assert any(line.split()[:2] == [name, "running"] for line in listing.stdout.splitlines()), listing.stdout
    stop = cli(airflow_server, "stop", name)
    assert stop.returncode == 0 and "stop requested" in stop.stdout, stop.stderr
    assert airflow_server.wait_for_run("training_job", run["dag_run_id"])["state"] == "failed"
    status = cli(airflow_server, "status", name)
    assert f"{name}: stopped" in status.stdout and "reason: Stopped by admin at " in status.stdout, status.stdout
    assert "API_SERVER_ERROR" not in status.stdout
    _, job = airflow_server.api.call("GET", f"/training-jobs/api/jobs/training_job/{quote(run['dag_run_id'])}/-1")
    assert job["status"] == "stopped" and job["failure"].startswith("Stopped by admin at "), job
    logs = cli(airflow_server, "logs", name)
    assert "step=0" in logs.stdout


def test_tuner_runs_three_trials_and_picks_the_best_job_and_model(session, tmp_path, airflow_server):
    est = Estimator(entry_point="train.py", source_dir=str(code_dir(tmp_path, TRAIN_SCRIPT)), session=session,
                    hyperparameters={"epochs": 2}, metric_definitions=LOSS, base_job_name="sdk-tune")
    tuner = HyperparameterTuner(est, objective_metric_name="loss", objective_type="Minimize",
                                hyperparameter_ranges={"lr": CategoricalParameter([0.5, 0.2, 0.9])},
                                max_jobs=3, strategy="grid", early_stopping_type="Off")
    tuner.fit()
    summary = tuner.summary()
    assert summary["counts"]["completed"] == 3
    best = tuner.best_training_job()
    assert best == next(t["job_name"] for t in summary["trials"] if t["params"] == {"lr": 0.2})
    assert tuner.model_data().endswith(f"/models/{best}/output/model.tar.gz")
    with tarfile.open(tuner.model_data()) as tar:
        assert tar.extractfile("lr.txt").read() == b"0.2"
    assert tuner.best_estimator().hyperparameters == {"epochs": 2, "lr": 0.2}
    assert [p["value"] for p in tuner.best_job.metrics()["loss"]] == [0.1, 0.05]
    # the CLI lists the search and its trials by the names the view shows, and takes a trial's name
    search_name = tuner.latest_tuning_job.job_name
    listing = cli(airflow_server, "list").stdout.splitlines()
    assert any(line.split()[:2] == [search_name, "succeeded"] and "(search, 3 trials)" in line for line in listing), listing
    assert any(line.split()[:2] == [best, "succeeded"] for line in listing), listing
    status = cli(airflow_server, "status", best)
    assert f"{best}: succeeded" in status.stdout and f"model: {tuner.model_data()}" in status.stdout, status
    assert "launch_training" in status.stdout


# ---------------------------------------------------------------------------------------------------------------
# the SDK guide's examples (docs/sdk.md)


def sdk_examples() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "sdk.md").read_text(), re.S)
    return [b for b in blocks if "from training_sdk import" in b]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, airflow_server):
    work = tmp_path_factory.mktemp("readme")
    (work / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    spec = importlib.util.spec_from_file_location("demo", REPO / "examples" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    demo.make_data(work / "demo-bucket" / "data" / "train")
    (work / "simple_auth_manager_passwords.json.generated").write_text(json.dumps({"admin": airflow_server.password}))
    return work


def run_example(code: str, workdir: Path, server) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINING_API_", "AIRFLOW__CORE__SIMPLE"))}
    env.update({"TRAINING_API_URL": server.base_url, "TRAINING_SDK_CONFIG": str(workdir / "none.json"),
                "PYTHONPATH": os.pathsep.join([str(REPO / "sdk"), env.get("PYTHONPATH", "")])})
    env.pop("AIRFLOW_HOME", None)
    return subprocess.run([sys.executable, "-c", code], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_sdk_guide_has_the_pai_sagemaker_and_tuner_examples():
    examples = sdk_examples()
    assert len(examples) == 3
    assert "$PAI_USER_ARGS" in examples[0] and "max_run=3600" in examples[1] and "HyperparameterTuner" in examples[2]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["pai", "sagemaker", "tuner"])
def test_sdk_guide_example_runs_as_written(index, workdir, airflow_server):
    done = run_example(sdk_examples()[index], workdir, airflow_server)
    assert done.returncode == 0, done.stderr[-4000:]
    model = Path(re.findall(r"(/\S+/model\.tar\.gz)", done.stdout)[-1])
    with tarfile.open(model) as tar:
        assert "model.npz" in tar.getnames()
    if index == 0:
        assert "epoch=9" in done.stdout  # the training log streamed to stdout
    if index == 1:
        assert str(workdir / "demo-bucket" / "models") in str(model)  # the relative output_path, made absolute
        assert "'value'" in done.stdout


def test_the_staging_upload_refuses_oversized_or_altered_code(session, airflow_server):
    import hashlib
    import http.client

    from training_sdk.session import ApiError

    body = b"not the archive that was hashed"
    with pytest.raises(ApiError, match="answered 400: the upload hashes to") as err:
        session.upload_code("training_job", body, hashlib.sha256(b"something else").hexdigest())
    assert err.value.status == 400
    # a body declared over the limit is refused before it is read (the client never sends 64 MiB here)
    conn = http.client.HTTPConnection("127.0.0.1", airflow_server.port, timeout=30)
    conn.putrequest("PUT", f"/training-sdk/code/{'0' * 64}.tar.gz?dag_id=training_job")
    conn.putheader("Authorization", f"Bearer {session._headers()['Authorization'].split()[1]}")
    conn.putheader("Content-Length", str(65 * 1024 * 1024))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and b"sdk_code_max_bytes" in response.read()
    unauthenticated = Session(api_url=airflow_server.base_url, token="not-a-token")
    with pytest.raises(ApiError) as err:
        unauthenticated.upload_code("training_job", body, hashlib.sha256(body).hexdigest())
    assert err.value.status in (401, 403)
    staged = Path(airflow_server.home, "workspace", "staging", "code")
    assert not any(p.name.startswith("0000") or p.suffix == ".partial" for p in (staged.rglob("*") if staged.is_dir() else []))


def test_concurrent_uploads_keep_the_quota_then_the_user_lists_refreshes_and_deletes_their_code(session, airflow_server):
    """The served quota is the shipped 512 MiB: a sparse archive-named file (no disk) fills all of the user's quota
    but 1 MB, so of two concurrent 600 kB uploads one is kept, the other refused; then list, expiry refresh and delete
    through the SDK client and the CLI."""
    import concurrent.futures
    import hashlib

    from training_sdk.errors import TrainingSdkError
    from training_sdk.session import ApiError

    staged = Path(airflow_server.home, "workspace", "staging", "code", "admin")
    staged.mkdir(parents=True, exist_ok=True)
    before = session.staged_code()
    quota, size = before["quota_bytes"], 600_000
    filler = staged / f"{hashlib.sha256(b'filler of the quota test').hexdigest()}.tar.gz"
    bodies = [(hashlib.sha256(seed).digest() * (size // 32 + 1))[:size] for seed in (b"one", b"two")]
    shas = [hashlib.sha256(body).hexdigest() for body in bodies]
    try:
        with open(filler, "wb") as out:
            out.truncate(quota - before["used_bytes"] - 1_000_000)
        barrier = threading.Barrier(2)

        def upload(i: int):
            barrier.wait(30)
            try:
                return session.upload_code("training_job", bodies[i], shas[i])
            except ApiError as err:
                return err

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(upload, range(2)))
        kept = [sha for sha, a in zip(shas, answers) if isinstance(a, dict)]
        refused = [a for a in answers if isinstance(a, ApiError)]
        # each fits alone, so one is kept (the quota checks while streaming start at 1 MiB: the decisive one decides)
        assert len(kept) == 1 and len(refused) == 1, answers
        assert refused[0].status == 413 and "sdk_code_quota_bytes" in str(refused[0]), refused
        listed = session.staged_code()
        names = {a["name"] for a in listed["archives"]}
        assert names & {f"{s}.tar.gz" for s in shas} == {f"{s}.tar.gz" for s in kept}  # the refused one is gone
        assert listed["used_bytes"] <= quota and listed["expiry_days"] == 30
        assert not [p for p in staged.iterdir() if p.name.endswith(".partial")]
    finally:
        filler.unlink(missing_ok=True)

    # an upload of code already staged refreshes its expiry; an expired archive goes when its user lists
    sha = kept[0]
    path = staged / f"{sha}.tar.gz"
    aged = time.time() - 20 * 86400
    os.utime(path, (aged, aged))
    session.upload_code("training_job", bodies[shas.index(sha)], sha)
    row = next(a for a in session.staged_code()["archives"] if a["sha256"] == sha)
    assert time.time() - path.stat().st_mtime < 600 and row["expires_at"] > row["uploaded_at"]
    os.utime(path, (aged - 11 * 86400,) * 2)
    listed = session.staged_code()
    assert path.name in listed["expired"] and not path.exists()

    # list and delete through the client and the CLI (only the caller's own: the server names the directory)
    other = shas[1 - shas.index(sha)]
    session.upload_code("training_job", bodies[shas.index(other)], other)
    listing = cli(airflow_server, "code", "list")
    assert listing.returncode == 0 and other in listing.stdout and "sdk_code_quota_bytes" in listing.stdout, \
        listing.stderr
    deleted = cli(airflow_server, "code", "delete", other)
    assert deleted.returncode == 0 and f"deleted {other}.tar.gz ({size} bytes)" in deleted.stdout, deleted.stderr
    assert other not in {a["sha256"] for a in session.staged_code()["archives"]}
    with pytest.raises(TrainingSdkError, match=f"you have no staged code named {other}.tar.gz"):
        session.delete_code(other)
    again = cli(airflow_server, "code", "delete", other)
    assert again.returncode == 2 and "no staged code named" in again.stderr
    session.upload_code("training_job", bodies[0], shas[0])
    assert session.delete_code(shas[0]) == {"deleted": f"{shas[0]}.tar.gz", "bytes": size}
    with pytest.raises(TrainingSdkError, match="name the archive <sha256 of the archive>.tar.gz"):
        session.delete_code("not-a-sha")

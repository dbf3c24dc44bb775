"""The SDK's plugin loads, mounts its app at its own prefix, and costs task processes nothing; its staged code routes
(upload, list, delete, quota, expiry) on the app itself, with Airflow's login and DAG permission replaced by a user
named in a test header (the real login, permissions and server: tests/integration/test_sdk.py)."""

import asyncio
import hashlib
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

DAY = 86400


def test_airflow_loads_the_sdk_plugin_with_its_app(repo_root):
    from importlib.metadata import entry_points

    from airflow import plugins_manager

    # Registered through the distribution's entry point (pyproject.toml), not the plugins folder.
    assert "training_sdk_api" in {ep.name for ep in entry_points(group="airflow.plugins")}, (
        "the installed airflow-training-jobs predates its airflow.plugins entry points: run make install")
    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    assert "training_sdk_api" in info, plugins_manager.get_import_errors()
    assert [a["url_prefix"] for a in info["training_sdk_api"]["fastapi_apps"]] == ["/training-sdk"]


def test_loading_the_plugin_does_not_build_the_app(repo_root):
    code = ("import sys, training_sdk_api; "
            "assert 'fastapi' not in sys.modules and 'airflow.api_fastapi.core_api.security' not in sys.modules")
    path = os.pathsep.join([str(repo_root / "plugins"), str(repo_root), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 0, result.stderr[-2000:]


# -- the routes -----------------------------------------------------------------------------------------------------
QUOTA = 100_000
SIZE = 60_000  # two of them pass QUOTA, one fits


class _User:
    def __init__(self, name: str):
        self.name = name

    def get_name(self) -> str:
        return self.name


@pytest.fixture
def sdk(monkeypatch, tmp_path):
    """A fresh app whose caller is the X-Test-User header (401 without it), whose DAG check knows training_job, with
    the workspace in tmp_path and a quota of QUOTA bytes; the cross-site guard stays."""
    from fastapi import HTTPException, Request

    from airflow.api_fastapi.core_api.security import get_user

    from training_console import sdk_code_api

    monkeypatch.setenv("AIRFLOW__TRAINING__WORKSPACE", str(tmp_path / "workspace"))
    monkeypatch.setenv("AIRFLOW__TRAINING__SDK_CODE_QUOTA_BYTES", str(QUOTA))
    monkeypatch.setenv("AIRFLOW__TRAINING__SDK_CODE_EXPIRY_DAYS", "30")
    monkeypatch.setattr(sdk_code_api, "dag_exists", lambda dag_id: dag_id == "training_job")
    app = sdk_code_api.create_app()

    def caller(request: Request) -> _User:
        if "x-test-user" not in request.headers:
            raise HTTPException(401, "Not authenticated")
        return _User(request.headers["x-test-user"])

    app.dependency_overrides[get_user] = caller
    for route in app.routes:  # requires_access_dag(...)'s closure: allowed (the real check: the integration test)
        for dep in getattr(route, "dependencies", []):
            if "requires_access_dag" in getattr(dep.dependency, "__qualname__", ""):
                app.dependency_overrides[dep.dependency] = lambda: None
    return app


def _staging(tmp_path, user: str = "alice"):
    return tmp_path / "workspace" / "staging" / "code" / user


async def _send(app, method: str, path: str, user: str | None = "alice", content=None, headers=None):
    sent = {"Authorization": "Bearer token-of-the-test", **({"X-Test-User": user} if user else {}), **(headers or {})}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://airflow.example:8080") as client:
        return await client.request(method, path, content=content, headers=sent)


def call(app, method: str, path: str, **kwargs) -> httpx.Response:
    return asyncio.run(_send(app, method, path, **kwargs))


def archive(seed: str, size: int = SIZE) -> tuple[bytes, str]:
    body = (hashlib.sha256(seed.encode()).digest() * (size // 32 + 1))[:size]
    return body, hashlib.sha256(body).hexdigest()


def upload(app, seed: str, user: str = "alice", size: int = SIZE) -> httpx.Response:
    body, sha = archive(seed, size)
    return call(app, "PUT", f"/code/{sha}.tar.gz?dag_id=training_job", user=user, content=body,
                headers={"Content-Type": "application/gzip"})


def _racing_upload(app, body: bytes, sha: str, barrier: threading.Barrier):
    """An upload whose body is sent in 10 kB chunks, all but the last before `barrier` (both uploads are mid-stream,
    their partial files on disk, before either ends). No Content-Length: nothing is refused before streaming."""
    async def chunks():
        for start in range(0, len(body) - 10_000, 10_000):
            yield body[start:start + 10_000]
            await asyncio.sleep(0)
        await asyncio.to_thread(barrier.wait, 30)
        yield body[-10_000:]

    return _send(app, "PUT", f"/code/{sha}.tar.gz?dag_id=training_job", content=chunks())


@pytest.mark.parametrize("loops, check_every", [("one event loop", None), ("two event loops", None),
                                                ("one event loop", 1)],
                         ids=["one-loop", "two-loops-like-two-workers", "checked-after-every-chunk"])
def test_two_concurrent_uploads_of_one_user_never_pass_the_quota(sdk, tmp_path, monkeypatch, loops, check_every):
    from training_console import sdk_code_api

    if check_every:
        monkeypatch.setattr(sdk_code_api, "QUOTA_CHECK_BYTES", check_every)
    (a, sha_a), (b, sha_b) = archive("a"), archive("b")
    barrier = threading.Barrier(2)
    if loops == "one event loop":
        async def both():
            return await asyncio.gather(_racing_upload(sdk, a, sha_a, barrier), _racing_upload(sdk, b, sha_b, barrier))

        answers = asyncio.run(both())
    else:  # each upload on its own thread and event loop, as two API server workers would serve them
        answers = [None, None]

        def run(i, body, sha):
            answers[i] = asyncio.run(_racing_upload(sdk, body, sha, barrier))

        threads = [threading.Thread(target=run, args=(0, a, sha_a)), threading.Thread(target=run, args=(1, b, sha_b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    statuses = sorted(r.status_code for r in answers)
    assert statuses.count(200) <= 1 and set(statuses) <= {200, 413}, [r.text for r in answers]
    if check_every is None:  # the decisive check only: exactly one of the two is kept
        assert statuses == [200, 413], [r.text for r in answers]
    refused = next(r for r in answers if r.status_code == 413).json()["detail"]
    assert f"your quota of {QUOTA} bytes ([training] sdk_code_quota_bytes" in refused and "DELETE" in refused
    files = sorted(os.listdir(_staging(tmp_path)))
    kept = [f for f in files if f.endswith(".tar.gz")]
    assert len(kept) == statuses.count(200) and not [f for f in files if f.endswith(".partial")], files
    assert sum(os.path.getsize(_staging(tmp_path) / f) for f in kept) <= QUOTA


def test_uploads_within_the_quota_are_kept_and_the_same_code_again_refreshes_its_expiry(sdk, tmp_path):
    first = upload(sdk, "a")
    assert first.status_code == 200, first.text
    path = first.json()["source_dir"]
    assert path == str(_staging(tmp_path) / f"{archive('a')[1]}.tar.gz") and os.path.getsize(path) == SIZE
    over = upload(sdk, "b")
    assert over.status_code == 413 and "sdk_code_quota_bytes" in over.json()["detail"]
    assert upload(sdk, "small", size=1000).status_code == 200  # what fits still does
    old = time.time() - 20 * DAY
    os.utime(path, (old, old))
    again = upload(sdk, "a")  # the same code: replaces itself, within the quota, and its expiry starts over
    assert again.status_code == 200, again.text
    assert time.time() - os.path.getmtime(path) < 600
    assert not [f for f in os.listdir(_staging(tmp_path)) if f.endswith(".partial")]
    altered = call(sdk, "PUT", f"/code/{'0' * 64}.tar.gz?dag_id=training_job", content=b"x")
    assert altered.status_code == 400 and "hashes to" in altered.json()["detail"]
    bad = call(sdk, "PUT", "/code/notasha.tar.gz?dag_id=training_job", content=b"x")
    assert bad.status_code == 400 and "<sha256 of the archive>.tar.gz" in bad.json()["detail"]


def test_the_list_shows_the_callers_archives_and_quota_use(sdk, tmp_path):
    empty = call(sdk, "GET", "/code")
    assert empty.status_code == 200 and empty.json()["archives"] == [] and empty.json()["used_bytes"] == 0
    assert upload(sdk, "a").status_code == 200
    assert upload(sdk, "b", user="bob", size=500).status_code == 200
    listed = call(sdk, "GET", "/code").json()
    sha = archive("a")[1]
    assert listed["quota_bytes"] == QUOTA and listed["used_bytes"] == SIZE and listed["expiry_days"] == 30
    [item] = listed["archives"]
    assert item["name"] == f"{sha}.tar.gz" and item["sha256"] == sha and item["bytes"] == SIZE
    assert item["source_dir"] == str(_staging(tmp_path) / item["name"])
    from datetime import datetime

    uploaded, expires = datetime.fromisoformat(item["uploaded_at"]), datetime.fromisoformat(item["expires_at"])
    assert abs(uploaded.timestamp() - time.time()) < 600 and (expires - uploaded).days == 30
    assert [a["bytes"] for a in call(sdk, "GET", "/code", user="bob").json()["archives"]] == [500]
    assert call(sdk, "GET", "/code", user=None).status_code == 401


def test_a_user_deletes_their_own_code_and_never_another_users(sdk, tmp_path):
    assert upload(sdk, "a").status_code == 200
    name = f"{archive('a')[1]}.tar.gz"
    theirs = call(sdk, "DELETE", f"/code/{name}", user="bob")
    assert theirs.status_code == 404 and theirs.json()["detail"].startswith(f"you have no staged code named {name}")
    assert (_staging(tmp_path) / name).is_file()
    for bad in ("..%2Falice%2F" + name, "..", name.replace(".tar.gz", ".zip")):
        answer = call(sdk, "DELETE", f"/code/{bad}", user="bob")
        assert answer.status_code in (400, 404, 405), (bad, answer.text)
    assert (_staging(tmp_path) / name).is_file()
    assert call(sdk, "DELETE", f"/code/{name}", user=None).status_code == 401
    mine = call(sdk, "DELETE", f"/code/{name}")
    assert mine.status_code == 200 and mine.json() == {"deleted": name, "bytes": SIZE}
    assert not (_staging(tmp_path) / name).exists()
    assert call(sdk, "DELETE", f"/code/{name}").status_code == 404
    assert call(sdk, "GET", "/code").json()["used_bytes"] == 0


def test_the_caller_is_known_before_what_they_ask_is_judged(sdk):
    # The routes' dependencies in order: who calls (401), the archive's name (400), then whether the DAG exists (404).
    body, sha = archive("a", 10)
    assert call(sdk, "DELETE", "/code/not-an-archive.zip", user=None).status_code == 401
    assert call(sdk, "PUT", "/code/not-an-archive.zip?dag_id=nope", user=None, content=body).status_code == 401
    assert call(sdk, "PUT", "/code/not-an-archive.zip?dag_id=nope", content=body).status_code == 400
    unknown = call(sdk, "PUT", f"/code/{sha}.tar.gz?dag_id=nope", content=body)
    assert unknown.status_code == 404 and unknown.json()["detail"].startswith("DAG 'nope' does not exist")


def test_state_changing_requests_pass_the_cross_site_guard(sdk, tmp_path):
    assert upload(sdk, "a").status_code == 200
    name = f"{archive('a')[1]}.tar.gz"
    form = {"Authorization": "", "Content-Type": "application/x-www-form-urlencoded"}
    forged = call(sdk, "DELETE", f"/code/{name}", headers=form)
    assert forged.status_code == 403 and forged.json()["detail"].startswith("refused: ")
    cross = call(sdk, "PUT", f"/code/{archive('b', 10)[1]}.tar.gz?dag_id=training_job", content=archive("b", 10)[0],
                 headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    assert (_staging(tmp_path) / name).is_file() and len(os.listdir(_staging(tmp_path))) == 1 + 1  # and the lock


def test_expired_code_goes_when_its_user_lists_or_uploads(sdk, tmp_path, monkeypatch):
    for seed in ("a", "b"):
        assert upload(sdk, seed, size=1000).status_code == 200
    a, b = (_staging(tmp_path) / f"{archive(s, 1000)[1]}.tar.gz" for s in ("a", "b"))
    old = time.time() - 31 * DAY
    os.utime(a, (old, old))
    dead_partial = _staging(tmp_path) / ".abc.xyz.partial"
    dead_partial.write_bytes(b"x" * 10)
    os.utime(dead_partial, (time.time() - 7200, time.time() - 7200))
    listed = call(sdk, "GET", "/code").json()
    assert sorted(listed["expired"]) == sorted([a.name, dead_partial.name])
    assert [x["name"] for x in listed["archives"]] == [b.name] and not a.exists() and not dead_partial.exists()
    os.utime(b, (old, old))
    assert upload(sdk, "c", size=1000).status_code == 200 and not b.exists()  # an upload sweeps too
    monkeypatch.setenv("AIRFLOW__TRAINING__SDK_CODE_EXPIRY_DAYS", "0")  # never
    c = _staging(tmp_path) / f"{archive('c', 1000)[1]}.tar.gz"
    os.utime(c, (0, 0))
    listed = call(sdk, "GET", "/code").json()
    assert listed["expiry_days"] == 0 and listed["archives"][0]["expires_at"] is None and c.exists()
    monkeypatch.setenv("AIRFLOW__TRAINING__SDK_CODE_EXPIRY_DAYS", "soon")
    from operators.settings import sdk_code_expiry_days

    with pytest.raises(ValueError, match=r"\[training\] sdk_code_expiry_days must be a number >= 0, got 'soon'"):
        sdk_code_expiry_days()


def test_the_workspace_garbage_collection_sweeps_every_users_expired_code(sdk, tmp_path, monkeypatch):
    from operators.state.retention import collect_garbage

    for user in ("alice", "bob"):
        assert upload(sdk, user, user=user, size=1000).status_code == 200
    alice, bob = (_staging(tmp_path, u) / f"{archive(u, 1000)[1]}.tar.gz" for u in ("alice", "bob"))
    os.utime(alice, (time.time() - 3 * DAY,) * 2)

    class NoCache:
        def entries(self):
            return []

    jobs_dir = str(tmp_path / "workspace" / "jobs")
    assert collect_garbage(jobs_dir, NoCache(), 0, code_expiry_days=0).removed_code == []  # 0: never
    assert collect_garbage(jobs_dir, NoCache(), 0, code_expiry_days=7).removed_code == []
    monkeypatch.setenv("AIRFLOW__TRAINING__SDK_CODE_EXPIRY_DAYS", "2")  # the setting, when none is given
    assert collect_garbage(jobs_dir, NoCache(), 0).removed_code == [f"alice/{alice.name}"]
    assert not alice.exists() and bob.exists()


def test_a_users_listing_keeps_expired_code_a_kept_lineage_of_a_model_names(sdk, tmp_path):
    """The per-user expiry (upload, list) keeps an archive a model can be reproduced from, as the GC does."""
    import json

    from operators.state.job_state import ensure_state_dir

    for seed in ("model-code", "other-code"):
        assert upload(sdk, seed, size=1000).status_code == 200
    (named, kept_sha), (other, _sha) = ((_staging(tmp_path) / f"{archive(s, 1000)[1]}.tar.gz", archive(s, 1000)[1])
                                        for s in ("model-code", "other-code"))
    for path in (named, other):
        os.utime(path, (time.time() - 40 * DAY,) * 2)
    state = ensure_state_dir(str(tmp_path / "workspace"), "churn-1")
    with open(os.path.join(state, "lineage.json"), "w") as out:
        json.dump({"code": {"archive_sha256": kept_sha}, "outcome": {"model_uri": "/m/churn-1/model.tar.gz"}}, out)
    listed = call(sdk, "GET", "/code").json()
    assert [a["sha256"] for a in listed["archives"]] == [kept_sha]
    assert named.exists() and not other.exists()

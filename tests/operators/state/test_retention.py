"""Workspace garbage collection: dead jobs' cache pins released, old job roots and entries removed by retention."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from operators.cache.data_cache import DataCacheHook
from operators.storage.hook import ObjectStorageHook
from operators.state.retention import DAY, collect_garbage
from operators.state.job_state import LAUNCH_PIDS, ensure_state_dir
from operators.settings import TrainingSettings


@pytest.fixture
def workspace(tmp_path):
    settings = TrainingSettings(workspace=str(tmp_path / "workspace"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a" * 1000)
    cache = DataCacheHook(settings.cache_dir, ObjectStorageHook(None, settings=settings), max_bytes=0)
    return settings, cache, str(data)


def _job(settings, name: str) -> Path:
    root = Path(settings.job_root(name))
    (root / "output").mkdir(parents=True)
    return root


def _age(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(path, (when, when))


def test_the_pin_of_a_job_whose_root_is_gone_is_released_and_the_entry_can_be_evicted(workspace):
    settings, cache, data = workspace
    alive, dead = _job(settings, "alive"), _job(settings, "dead")
    cache.prefetch(data, user="alive")
    entry = cache.prefetch(data, user="dead")
    import shutil

    shutil.rmtree(dead)
    done = collect_garbage(settings.jobs_dir, cache, retention_days=0)
    assert [p.split("@")[0] for p in done.released_pins] == ["dead"]
    assert cache.entries()[0].users == ("alive",)
    assert not done.removed_job_roots and not done.removed_entries and alive.is_dir() and Path(entry.path).exists()


def test_retention_removes_old_job_roots_stale_pins_and_unused_entries(workspace):
    settings, cache, data = workspace
    old, new = _job(settings, "old"), _job(settings, "new")
    old_state = Path(ensure_state_dir(settings.workspace, "old"))
    entry = cache.prefetch(data, user="old")
    for path in (old / "output", old, old_state):
        _age(path, 10)
    pin = Path(cache.cache_dir, entry.key, "users", "u-old")
    _age(pin, 10)
    _age(Path(cache.cache_dir, entry.key, "last_used"), 10)
    done = collect_garbage(settings.jobs_dir, cache, retention_days=7)
    assert done.removed_job_roots == ["old"] and not old.exists() and new.is_dir()
    assert not old_state.exists()  # the job's platform state goes with its root
    assert done.released_pins and done.removed_entries == [entry.key]
    assert not Path(entry.path).exists() and cache.entries() == []


def test_a_running_local_training_keeps_its_root_and_pins_however_old(workspace):
    settings, cache, data = workspace
    root = _job(settings, "long")
    entry = cache.prefetch(data, user="long")
    # Standing in for the launch: a process whose command line names the job root, as bubblewrap's does.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(root)])
    state = Path(ensure_state_dir(settings.workspace, "long"))
    try:
        # Popen returns once the child forked; until it has exec'd, its command line is still pytest's (a loaded
        # machine showed that window): the record is acted on only for a process that names the job root.
        deadline = time.monotonic() + 60
        while str(root) not in psutil.Process(sleeper.pid).cmdline():
            assert time.monotonic() < deadline, "the stand-in process never started"
            time.sleep(0.01)
        (state / LAUNCH_PIDS).write_text(json.dumps([[sleeper.pid, psutil.Process(sleeper.pid).create_time()]]))
        for path in (root / "output", state / LAUNCH_PIDS, state, root,
                     Path(cache.cache_dir, entry.key, "users", "u-long")):
            _age(path, 30)
        done = collect_garbage(settings.jobs_dir, cache, retention_days=7)
        assert not done.removed_job_roots and not done.released_pins and root.is_dir()
        assert cache.entries()[0].users == ("long",)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_pid_record_the_job_wrote_into_its_root_does_not_keep_it_forever(workspace):
    # The job root is the tenant's: a launch-pids file there naming a live process (any process on the worker)
    # must not pin the root and its cache entries against retention.
    settings, cache, data = workspace
    root = _job(settings, "squatter")
    cache.prefetch(data, user="squatter")
    victim = psutil.Process(os.getpid())
    (root / ".launch-pids.json").write_text(json.dumps([[victim.pid, victim.create_time()]]))
    for path in (root / "output", root / ".launch-pids.json", root):
        _age(path, 30)
    done = collect_garbage(settings.jobs_dir, cache, retention_days=7)
    assert done.removed_job_roots == ["squatter"] and not root.exists()


def _staged_archive(settings, user: str, content: bytes, days_old: float) -> Path:
    import hashlib

    path = Path(settings.code_staging_dir, user, hashlib.sha256(content).hexdigest() + ".tar.gz")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    _age(path, days_old)
    return path


def _kept_lineage(settings, job: str, archive: Path, model_uri: str | None) -> None:
    """The kept record of a run whose code was `archive` (operators/lineage/record.py writes it; the fields read)."""
    state = Path(ensure_state_dir(settings.workspace, job))
    (state / "lineage.json").write_text(json.dumps({
        "job_name": job, "code": {"source_uri": str(archive), "archive_sha256": archive.name[:64]},
        "outcome": {"status": "succeeded" if model_uri else "failed", "model_uri": model_uri}}))


def test_an_expired_sdk_archive_a_kept_lineage_of_a_model_names_stays_for_its_reproduction(workspace):
    settings, cache, _data = workspace
    named = _staged_archive(settings, "alice", b"the code of a model", 30)
    of_failed = _staged_archive(settings, "alice", b"the code of a failed run", 30)
    unnamed = _staged_archive(settings, "bob", b"code nobody ran", 30)
    _job(settings, "churn-1")
    _kept_lineage(settings, "churn-1", named, "/models/churn-1/output/model.tar.gz")
    _job(settings, "churn-2")
    _kept_lineage(settings, "churn-2", of_failed, None)
    (Path(ensure_state_dir(settings.workspace, "broken")) / "lineage.json").write_text("{not json")
    done = collect_garbage(settings.jobs_dir, cache, retention_days=0, code_expiry_days=7)
    assert sorted(done.removed_code) == sorted([f"alice/{of_failed.name}", f"bob/{unnamed.name}"])
    assert named.exists() and not of_failed.exists() and not unnamed.exists()

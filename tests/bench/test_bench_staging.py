"""bench/bench_staging.py runs as bench/README.md documents it, on a fresh clone: no PYTHONPATH, no installed
checkout of its own (the venv's editable install may point elsewhere), nothing built in the clone but MinIO's cached
binary. It once failed there with `No module named 'operators.cache.data_cache'`: tests/ went first on sys.path and
its namespace folder tests/operators shadowed the package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minio_server import minio_binary

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_clone(tmp_path: Path) -> Path:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip(f"{REPO} is not a git checkout (or git is missing): nothing to clone")
    try:
        minio_binary()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    return clone


def test_staging_benchmark_runs_on_a_fresh_clone(fresh_clone: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIRFLOW_HOME") and
           not k.startswith("AIRFLOW__")}
    proc = subprocess.run(
        [sys.executable, "bench/bench_staging.py", "--quick", "--repeats", "1", "--only", "1x-64mib", "--ours-only",
         "--workdir", str(tmp_path / "work")],
        cwd=fresh_clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    results = json.loads((fresh_clone / "bench" / "results" / "staging.json").read_text())
    cold = results["datasets"]["1 x 64 MiB"]["cold"]
    assert [r["name"] for r in cold] == ["ours: DataCacheHook.prefetch", "ours: ObjectStorageHook.download"]
    assert "Warm re-stage, 1 x 64 MiB" in proc.stdout

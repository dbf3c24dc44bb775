"""Each backend declares what it can do (operators/launch/declaration.py) where the stages read it without its launcher:
the declaration is the launcher's own (its capabilities, its queue_of, its cluster steps), and reading it imports
neither Airflow nor the backend's client libraries."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from operators.jobspec.model import BACKENDS
from operators.launch.registry import declaration_for, launcher_class

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_declaration_is_what_the_launcher_does(backend):
    declared, launcher = declaration_for(backend), launcher_class(backend)
    assert launcher.capabilities == declared.capabilities
    assert declared.queues == callable(getattr(launcher, "queue_of", None))
    assert declared.steps == callable(getattr(launcher, "cluster_step", None))


def test_a_kubernetes_job_s_files_are_in_the_cluster_only_with_the_cluster_data_plane(monkeypatch):
    kubernetes = declaration_for("kubernetes")
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE", "shared_volume")
    assert kubernetes.cluster_workspace({}) is None
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE", "cluster")
    assert kubernetes.cluster_workspace({}) == "/workspace"
    assert declaration_for("local").cluster_workspace({}) is None
    assert declaration_for("docker").cluster_workspace({}) is None


def test_the_kubernetes_hosts_are_the_launchers():
    plan = declaration_for("kubernetes").host_plan
    launcher = launcher_class("kubernetes")(settings=object())
    assert plan.hosts("my-job", 3) == launcher.hosts("my-job", 3)
    assert plan.master_port() == launcher.master_port()


def test_reading_every_declaration_imports_no_airflow_and_no_backend_client():
    code = textwrap.dedent("""
        import json, sys
        from operators.launch.registry import declaration_for
        for backend in ("local", "docker", "kubernetes"):
            declaration_for(backend).host_plan
        print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"airflow", "kubernetes", "docker",
                                                                          "kubernetes_asyncio"})))
    """)
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'runtime'}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []

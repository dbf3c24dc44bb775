"""Fixtures for the runtime tests: real job roots on disk and real `train` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from training_runtime.config import write_config_files
from training_runtime.layouts import create_directories, layout_for

_TRAIN = Path(sys.executable).with_name("train")
TRAIN_COMMAND = [str(_TRAIN)] if _TRAIN.exists() else [sys.executable, "-m", "training_runtime"]

# A user script that records what it saw: argv, cwd and the environment.
RECORD_SCRIPT = """\
import json, os, sys
host = os.environ.get("TRAINING_CURRENT_HOST", "unknown")
seen = {"argv": sys.argv[1:], "cwd": os.getcwd(), "executable": sys.executable, "env": dict(os.environ)}
out = os.path.join(os.environ["TRAINING_ROOT"], "output", "data", "seen-%s.json" % host)
with open(out, "w") as f:
    json.dump(seen, f)
"""


@dataclass
class JobRoot:
    root: Path
    layout: object  # training_runtime.layouts.Layout

    def run(self, *args: str, env: dict | None = None, timeout: float = 60, root: bool = True,
            prefix: list[str] | None = None):
        """Run `train` on this root (as a real subprocess, after `prefix` if given,
        e.g. a wrapper that execs it); returns CompletedProcess."""
        command = (prefix or []) + TRAIN_COMMAND + (["--root", str(self.root)] if root else []) + list(args)
        return subprocess.run(
            command, capture_output=True, text=True, env=clean_env(env), timeout=timeout
        )

    def start(self, *args: str, env: dict | None = None, **popen) -> subprocess.Popen:
        """Start `train` on this root without waiting (text pipes for stdout/stderr)."""
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(
            TRAIN_COMMAND + ["--root", str(self.root)] + list(args),
            text=True,
            env=clean_env(env),
            **popen,
        )

    def seen(self, host: str = "algo-1") -> dict:
        return json.loads(Path(self.layout.output_data_dir, "seen-%s.json" % host).read_text())

    def write_code(self, name: str, text: str, mode: int | None = None) -> Path:
        path = Path(self.layout.code_dir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if mode is not None:
            path.chmod(mode)
        return path

    @property
    def failure(self) -> str | None:
        path = Path(self.layout.failure_file)
        return path.read_text() if path.exists() else None

    @property
    def succeeded(self) -> bool:
        return Path(self.layout.success_file).exists()


def clean_env(extra: dict | None = None) -> dict:
    """This process's environment without the variables that steer `train`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAINING_", "TM_", "SM_", "PAI_", "MA_")) and k != "JOB_COMPLETION_INDEX"
    }
    # The hosts of these test jobs are names that resolve nowhere (algo-1, ...): a
    # multi-host job would wait for them for 120 s. The tests of that wait
    # (test_hosts.py) set the bound themselves.
    env["TRAINING_HOST_WAIT_SECONDS"] = "0"
    env.update(extra or {})
    return env


@pytest.fixture
def make_job(tmp_path):
    """make_job(layout="ti", hyperparameters={...}, hosts=[...], channels=[...], **job_config)

    Writes a job root the way the launcher does (layouts + config helpers of the
    runtime's public API) with the recording script as entry point, unless
    `entry_point`/`command`/`code` say otherwise.
    """
    counter = iter(range(1000))

    def factory(
        layout: str = "ti",
        hyperparameters: dict | None = None,
        hosts: list[str] | tuple[str, ...] = ("algo-1",),
        channels: list[str] | tuple[str, ...] = ("train",),
        code: dict[str, str] | None = None,
        entry_point: str | None = "train.py",
        **job_config,
    ) -> JobRoot:
        root = tmp_path / ("job-%d" % next(counter))
        job_layout = create_directories(layout_for(layout, root), channels)
        files = {"train.py": RECORD_SCRIPT} if code is None else code
        job = JobRoot(root=root, layout=job_layout)
        for name, text in files.items():
            job.write_code(name, text)
        document = {"job_name": "test-job", "layout": layout, "entry_point": entry_point}
        document.update(job_config)
        write_config_files(
            job_layout,
            hyperparameters=hyperparameters or {},
            resource_config={"current_host": hosts[0], "hosts": list(hosts), "network_interface_name": "eth0"},
            input_data_config={channel: {"TrainingInputMode": "File"} for channel in channels},
            job_config=document,
        )
        return job

    return factory


@pytest.fixture
def record_script() -> str:
    return RECORD_SCRIPT


def pytest_sessionfinish(session):
    """Under xdist, a worker hands its part of the figure to the controller (pytest_testnodedown in tests/conftest.py)."""
    peer_runtimes = sys.modules.get("peer_runtimes")
    if hasattr(session.config, "workeroutput") and peer_runtimes is not None:
        session.config.workeroutput["peer_scoreboard"] = peer_runtimes.SCOREBOARD.results

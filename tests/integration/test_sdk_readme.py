"""The README's SDK examples, run as written (from a directory laid out like the repository after `make demo`)
against a real Airflow; the credentials are found the way `make airflow` leaves them: a
simple_auth_manager_passwords.json.generated in the current directory (only the URL differs: a free port)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from airflow_server import airflow_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def sdk_examples() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
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


def test_the_readme_has_the_pai_sagemaker_and_tuner_examples():
    examples = sdk_examples()
    assert len(examples) == 3
    assert "$PAI_USER_ARGS" in examples[0] and "max_run=3600" in examples[1] and "HyperparameterTuner" in examples[2]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["pai", "sagemaker", "tuner"])
def test_readme_example_runs_as_written(index, workdir, airflow_server):
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

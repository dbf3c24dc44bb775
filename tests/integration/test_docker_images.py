"""The images `make images` builds (docker/), run on the real engine: the training image runs `train` as its
non-root user on Python 3.11; the Airflow image imports the project's DAGs without errors and has `airflow`
and `train` (the smoke test a deployment would do first)."""

from __future__ import annotations

import json

import pytest
import training_runtime

from docker_support import AIRFLOW_IMAGE, TRAINING_IMAGE, docker_run, engine, require_image

pytestmark = pytest.mark.docker


def test_training_image_runs_train_as_its_non_root_user():
    require_image(engine(), TRAINING_IMAGE)
    script = "id -u; id -g; python3 -c 'import sys; print(sys.version)'; train --version; pwd"
    result = docker_run(TRAINING_IMAGE, "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    uid, gid, python, version, cwd = result.stdout.splitlines()
    assert (uid, gid) == ("1000", "1000")
    assert python.startswith("3.11.")
    assert version == f"train {training_runtime.__version__}"  # the worktree's runtime, not a stale one
    assert cwd == "/opt/ml/code"


SMOKE = """
import json, subprocess
from airflow.dag_processing.dagbag import DagBag
from airflow.plugins_manager import get_plugin_info
bag = DagBag("/opt/airflow/dags")
print(json.dumps({
    "airflow": subprocess.run(["airflow", "version"], capture_output=True, text=True).stdout.strip(),
    "train": subprocess.run(["train", "--version"], capture_output=True, text=True).stdout.strip(),
    "import_errors": {path: str(error)[-500:] for path, error in bag.import_errors.items()},
    "dags": sorted(bag.dag_ids),
    "plugins": {plugin["name"]: str(plugin["source"]) for plugin in get_plugin_info()},
}))
"""


def test_airflow_image_imports_the_dags_and_has_airflow_and_train():
    require_image(engine(), AIRFLOW_IMAGE)
    result = docker_run(AIRFLOW_IMAGE, "python3", "-c", SMOKE, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["import_errors"] == {}
    assert report["airflow"] == "3.3.2"
    assert report["train"] == f"train {training_runtime.__version__}"
    assert {"training_job", "hyperparameter_search"} <= set(report["dags"])
    assert "training_jobs" in report["plugins"]
    # Ours from the installed provider's entry points (plugins/ in the image is ignored: .airflowignore).
    ours = {name: source for name, source in report["plugins"].items() if source.startswith("airflow-training-jobs==")}
    assert "training_jobs" in ours and len(ours) == 2, report["plugins"]
    # Beside ours only the providers' own (the lineage extra's OpenLineage plugin), never an example plugin.
    assert all(source.startswith("apache-airflow-providers-") for name, source in report["plugins"].items()
               if name not in ours), report["plugins"]
    assert not any("example" in source for source in report["plugins"].values()), report["plugins"]

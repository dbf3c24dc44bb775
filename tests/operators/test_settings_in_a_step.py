"""[training] settings in a data-plane step (operators/step_process.py): read from the AIRFLOW__TRAINING*__<KEY>
variables the worker passes (operators/settings.py training_settings_env) as Airflow's conf reads them, with the same
fallbacks and one-line errors, and without importing Airflow."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from operators.launch.kubernetes.settings import kubernetes_settings
from operators.settings import EnvironmentConfig, get_json, ownership_settings, training_settings
from operators.step_process import STEP_ENV

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def step(monkeypatch):
    """This test's process as a step: only the environment speaks, not the suite's airflow.cfg."""
    monkeypatch.setenv(STEP_ENV, "{}")


def test_a_step_reads_the_settings_the_worker_passed_and_ignores_airflow_cfg(step, monkeypatch, tmp_path):
    # the suite's airflow.cfg says cache_max_bytes = 53687091200; a step has no airflow.cfg, only its environment
    monkeypatch.setenv("AIRFLOW__TRAINING__WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setenv("AIRFLOW__TRAINING__TRANSFER_CONCURRENCY", "7")
    monkeypatch.setenv("AIRFLOW__TRAINING__RETENTION_DAYS", "1.5")
    monkeypatch.setenv("AIRFLOW__TRAINING__LOCAL_ROOTS", "$HOME/a, /b")
    monkeypatch.setenv("AIRFLOW__TRAINING__TEAMS", '{"ml": ["ann"]}')
    monkeypatch.setenv("AIRFLOW__TRAINING__MAX_ACTIVE_RUNS", "3.0")  # Airflow's getint takes an integral float
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__KEEP_FINISHED_JOBS", "t")
    monkeypatch.delenv("AIRFLOW__TRAINING__CACHE_MAX_BYTES", raising=False)
    settings = training_settings()
    assert settings.workspace == str(tmp_path / "ws") and settings.transfer_concurrency == 7
    assert settings.retention_days == 1.5 and settings.max_active_runs == 3
    assert settings.cache_max_bytes == 0  # the code's fallback, as in a pod: airflow.cfg is not read
    assert settings.local_roots == (os.path.expanduser("~/a"), "/b")  # $VARIABLES expanded, as Airflow does
    assert ownership_settings()[1] == {"ml": ["ann"]}
    assert kubernetes_settings().keep_finished_jobs is True  # [training.kubernetes]: AIRFLOW__TRAINING_KUBERNETES__
    assert EnvironmentConfig().getsection("training")["transfer_concurrency"] == "7"


@pytest.mark.parametrize("variable, value, message", [
    ("AIRFLOW__TRAINING__MAX_CONCURRENT_TRIALS", "0", "max_concurrent_trials must be an integer >= 1, got '0'"),
    ("AIRFLOW__TRAINING__TRANSFER_CONCURRENCY", "2.5", "transfer_concurrency must be an integer, got '2.5'"),
    ("AIRFLOW__TRAINING__RETENTION_DAYS", "soon", "retention_days must be a number >= 0, got 'soon'"),
    ("AIRFLOW__TRAINING__LOCAL_SANDBOX", "chroot", "local_sandbox must be one of bubblewrap, none, got 'chroot'"),
])
def test_a_bad_value_in_a_step_is_the_same_one_line(step, monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        training_settings()
    assert str(err.value).startswith("airflow.cfg [") and "\n" not in str(err.value)


def test_bad_json_and_booleans_in_a_step_are_one_line(step, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__TEAMS", "{not json")
    with pytest.raises(ValueError, match=re.escape("[training] teams must be valid JSON, got '{not json'")):
        get_json("training", "teams", {})
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DEFERRABLE", "maybe")
    with pytest.raises(ValueError, match=re.escape("[training.kubernetes] deferrable must be true or false")):
        kubernetes_settings()


def test_the_settings_of_a_step_import_no_airflow(tmp_path):
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")]),
           STEP_ENV: "{}", "AIRFLOW__TRAINING__WORKSPACE": str(tmp_path), "AIRFLOW__TRAINING__DEFAULT_IMAGE": "x:1"}
    script = ("import sys, json; from operators.settings import training_settings; s = training_settings(); "
              "print(json.dumps([s.workspace, s.default_image, 'airflow' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [str(tmp_path), "x:1", False]

"""The Airflow UI in a real browser: Debian's chromium, driven by npm's playwright-core (`make browser-deps` installs
both; no browser is ever downloaded), against the real components started by tests/integration/airflow_server.py.
The walk-through itself is tests/integration/ui_browser.js: log in, trigger training_job from the trigger form with
the demo values, watch the run succeed, open the training-jobs view from Airflow's nav entry (in Airflow's sandboxed
frame, as a user meets it), see the loss curve and the Lineage panel (code digest, data version, image), download the model, follow the Training job extra link, clone with a
bad value (refused in the page, naming the field) and then a good one, see why a refused spec failed, watch a
running job's curve grow in its page and in the list, Stop it (asked in the page) and see who stopped it.
Screenshots are kept in test-artifacts/ui/ (git-ignored) at the repository root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from airflow_server import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SHOTS = REPO / "test-artifacts" / "ui"
PLAYWRIGHT = Path(os.environ.get("PLAYWRIGHT_CORE_DIR",
                                  Path.home() / ".cache/training-jobs/playwright-core-1.65.1")) / "node_modules"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def demo_job(tmp: Path) -> dict:
    """What `make demo` trains: the example logistic regression on generated data, from a local "bucket"."""
    import numpy as np

    code, data = tmp / "code", tmp / "data" / "train"
    code.mkdir(parents=True)
    data.mkdir(parents=True)
    shutil.copy(REPO / "examples/logistic_regression/train.py", code / "train.py")
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2000, 4))
    y = (x @ np.array([1.5, -2.0, 0.7, 0.0]) + 0.3 + rng.normal(scale=0.5, size=2000) > 0).astype(float)
    np.savetxt(data / "part-0.csv", np.hstack([x, y[:, None]]), delimiter=",", fmt="%.5f")
    return {"base_job_name": "demo", "source_dir": str(code), "entry_point": "train.py",
            "hyperparameters": {"epochs": 15, "learning_rate": 0.5}, "inputs": {"train": f"{data}/"},
            "output_path": str(tmp / "models"),
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"},
                                   {"Name": "accuracy", "Regex": "accuracy=([0-9.]+)"}]}


SLOW_TRAIN = """
import time
for epoch in range(600):
    print(f"epoch={epoch} loss={1.0 / (epoch + 1):.4f}", flush=True)
    time.sleep(1)
"""


def slow_job(tmp: Path) -> dict:
    """A job that trains for ten minutes unless stopped, printing a loss point a second."""
    (tmp / "slow").mkdir()
    (tmp / "slow" / "train.py").write_text(SLOW_TRAIN)
    return {"base_job_name": "slow", "source_dir": str(tmp / "slow"), "entry_point": "train.py",
            "output_path": str(tmp / "models"), "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}


def test_a_new_user_trains_from_the_form_and_follows_the_job_in_the_view(airflow_server, tmp_path):
    missing = [what for what, ok in (("chromium", Path(CHROMIUM).exists()), ("node", shutil.which("node")),
                                     ("playwright-core", (PLAYWRIGHT / "playwright-core").is_dir())) if not ok]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: run `make browser-deps` (make test does)")
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    env = {**os.environ, "NODE_PATH": str(PLAYWRIGHT), "CHROMIUM": CHROMIUM, "UI_BASE_URL": airflow_server.base_url,
           "UI_PASSWORD": airflow_server.password, "UI_SHOTS": str(SHOTS), "UI_RESULT": str(SHOTS / "result.json"),
           "UI_DEMO_CONF": json.dumps(demo_job(tmp_path)), "UI_SLOW_CONF": json.dumps(slow_job(tmp_path))}
    proc = subprocess.run(["node", str(REPO / "tests/integration/ui_browser.js")], env=env, capture_output=True,
                          text=True, timeout=1200)
    result = json.loads((SHOTS / "result.json").read_text()) if (SHOTS / "result.json").is_file() else {}
    assert proc.returncode == 0, (f"browser walk-through failed after steps {result.get('steps')} "
                                  f"(screenshot {SHOTS / 'failure.png'}):\n{result.get('error') or proc.stderr[-3000:]}"
                                  f"\nscheduler log:\n{airflow_server.log_tail('scheduler', 2000)}")
    assert result["steps"][-1].endswith("stopped") and result["model_bytes"] > 100
    for name in ("01-trigger-form", "02-jobs-list-embedded", "03-job-page", "04-bad-value", "04-jobs-list",
                 "05-job-running", "06-refused-spec", "07-stop-confirm", "08-job-stopped"):
        assert (SHOTS / f"{name}.png").stat().st_size > 10_000, name

"""The compare page and its charts in a real browser (tests/integration/compare_browser.js: Debian's chromium driven by
npm's playwright-core, `make browser-deps`), through Airflow's nav entry, against the real Airflow components of
tests/integration/airflow_server.py: two training_job runs (REST-triggered, real scheduler and `train` processes) are
found by tag and metric range in the list, selected and compared there (their lineage too: the same code digest,
lr marked as differing), a chart zoomed, the shareable URL opened; a
job's host log searched and downloaded, its output files previewed and downloaded; a two-trial hyperparameter
search compared from its row in the list; a running job stopped from the list. Screenshots go to test-artifacts/ui-compare/ (git-ignored)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from airflow_server import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SHOTS = REPO / "test-artifacts" / "ui-compare"
PLAYWRIGHT = Path(os.environ.get("PLAYWRIGHT_CORE_DIR",
                                  Path.home() / ".cache/training-jobs/playwright-core-1.65.1")) / "node_modules"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

TRAIN = """
import argparse, time
p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); p.add_argument("--epochs", type=int)
args = p.parse_args()
for epoch in range(args.epochs):
    print(f"epoch={epoch} loss={abs(args.lr - 0.3) + 1.0 / (epoch + 1):.4f}", flush=True)
    time.sleep(0.5)
"""


def test_two_jobs_compared_through_the_nav_entry_and_a_chart_zoomed(airflow_server, tmp_path):
    missing = [what for what, ok in (("chromium", Path(CHROMIUM).exists()), ("node", shutil.which("node")),
                                     ("playwright-core", (PLAYWRIGHT / "playwright-core").is_dir())) if not ok]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: run `make browser-deps` (make test does)")
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    jobs = [{"job_name": f"compare-lr-{i}", "lr": lr} for i, lr in enumerate((0.1, 0.4))]
    metric = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
    for job in jobs:
        conf = {"job_name": job["job_name"], "source_dir": str(code), "entry_point": "train.py",
                "hyperparameters": {"lr": job["lr"], "epochs": 4}, "output_path": str(tmp_path / "models"),
                "metric_definitions": metric, "tags": {"suite": "compare-browser"}}
        airflow_server.trigger("training_job", conf, run_id=job["job_name"])
    # a job that trains until it is stopped from the list (max_run_seconds ends it if the walk-through fails first)
    slow = {"job_name": "compare-slow", "source_dir": str(code), "entry_point": "train.py",
            "hyperparameters": {"lr": 0.2, "epochs": 100000}, "output_path": str(tmp_path / "models"),
            "metric_definitions": metric, "tags": {"suite": "compare-browser-stop"}, "max_run_seconds": 900}
    airflow_server.trigger("training_job", slow, run_id=slow["job_name"])
    # a search of two trials (grid over lr), run alongside: the list compares all its trials from its row
    search = {"job_name": "compare-search", "source_dir": str(code), "entry_point": "train.py",
              "output_path": str(tmp_path / "models"), "metric_definitions": metric, "hyperparameters": {"epochs": 2},
              "objective": "loss", "direction": "minimize", "strategy": "grid", "max_trials": 2,
              "search_space": {"lr": [0.2, 0.5]}}
    airflow_server.trigger("hyperparameter_search", search, run_id="compare-search")
    for dag_id, run_id in [*(("training_job", j["job_name"]) for j in jobs), ("hyperparameter_search", "compare-search")]:
        run = airflow_server.wait_for_run(dag_id, run_id, timeout=600)
        assert run["state"] == "success", airflow_server.task_states(dag_id, run_id)

    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    env = {**os.environ, "NODE_PATH": str(PLAYWRIGHT), "CHROMIUM": CHROMIUM, "UI_BASE_URL": airflow_server.base_url,
           "UI_PASSWORD": airflow_server.password, "UI_SHOTS": str(SHOTS), "UI_RESULT": str(SHOTS / "result.json"),
           "UI_JOBS": json.dumps(jobs)}
    proc = subprocess.run(["node", str(REPO / "tests/integration/compare_browser.js")], env=env, capture_output=True,
                          text=True, timeout=900)
    result = json.loads((SHOTS / "result.json").read_text()) if (SHOTS / "result.json").is_file() else {}
    assert proc.returncode == 0, (f"compare walk-through failed after steps {result.get('steps')} "
                                  f"(screenshot {SHOTS / 'failure.png'}):\n{result.get('error') or proc.stderr[-3000:]}")
    assert result["steps"][-1] == "stopped a running job from the list"
    # |lr - 0.3| + 1/4 after 4 epochs
    assert sorted(float(v) for v in result["final_loss"]) == pytest.approx([0.35, 0.45])
    assert "compare-lr-" in result["hover"]  # the hover label names the curves and their values
    # the host log searched and downloaded, the output files previewed and downloaded, the search's trials compared
    assert result["log_matches"] and all("epoch=2" in line for line in result["log_matches"])
    assert any(line.endswith(f"epoch=2 loss={abs(jobs[0]['lr'] - 0.3) + 1 / 3:.4f}") for line in result["log_matches"])
    assert "epoch=0" in result["log_download"] and "epoch=3" in result["log_download"]
    # the whole archive, byte for byte (the script saves no model: an empty one)
    assert result["model_bytes"] == (tmp_path / "models" / jobs[0]["job_name"] / "output" / "model.tar.gz").stat().st_size
    assert result["search_trials"] == 2
    assert result["bad_filter"].startswith("metric filter 'accuracy' is not a range")
    assert result["stop_results"] == ["compare-slow: stop requested"]
    stopped = airflow_server.wait_for_run("training_job", slow["job_name"], timeout=300)
    assert stopped["state"] == "failed" and stopped["note"].startswith("Stopped by admin at "), stopped
    assert result["outside_status"] == 400  # another job's model, named through '..': refused before any listing

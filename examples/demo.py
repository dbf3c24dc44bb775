"""`make demo`: run the training_job DAG end to end on the shipped example, then again with resume_from=latest.

A local directory stands in for the bucket (demo-bucket/): code and data are staged from it and the model lands in it.
"""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BUCKET = REPO / "demo-bucket"


def make_data(path: Path, rows: int = 2000, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4))
    y = (x @ np.array([1.5, -2.0, 0.7, 0.0]) + 0.3 + rng.normal(scale=0.5, size=rows) > 0).astype(float)
    path.mkdir(parents=True, exist_ok=True)
    np.savetxt(path / "part-0.csv", np.hstack([x, y[:, None]]), delimiter=",", fmt="%.5f")


def run_job(conf: dict) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(REPO)}
    cmd = [str(Path(sys.executable).parent / "airflow"), "dags", "test", "training_job", "--conf", json.dumps(conf)]
    print("$ airflow dags test training_job --conf '" + json.dumps(conf) + "'", flush=True)
    if subprocess.run(cmd, env=env, cwd=REPO).returncode != 0:
        sys.exit("demo: the training_job run failed; see the task logs above")


def newest_model() -> tuple[Path, dict]:
    models = sorted(BUCKET.glob("models/demo-*/output/model.tar.gz"), key=lambda p: p.stat().st_mtime)
    if not models:
        sys.exit("demo: no model.tar.gz was uploaded")
    metrics = json.loads((models[-1].parent / "metrics.json").read_text())["final"]
    with tarfile.open(models[-1]) as tar:
        assert "model.npz" in tar.getnames()
    return models[-1], metrics


def main() -> None:
    code = BUCKET / "code" / "logistic_regression"
    code.mkdir(parents=True, exist_ok=True)
    (code / "train.py").write_text((REPO / "examples/logistic_regression/train.py").read_text())
    make_data(BUCKET / "data" / "train")
    conf = {
        "base_job_name": "demo",
        "source_dir": str(code),
        "entry_point": "train.py",
        "hyperparameters": {"epochs": 15, "learning_rate": 0.5},
        "inputs": {"train": str(BUCKET / "data" / "train") + "/"},
        "output_path": str(BUCKET / "models"),
        "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"},
                               {"Name": "accuracy", "Regex": "accuracy=([0-9.]+)"}],
    }
    run_job(conf)
    first, m1 = newest_model()
    run_job({**conf, "resume_from": "latest"})
    second, m2 = newest_model()
    print("\n=== demo finished ===")
    print(f"first model:  {first}\n  loss={m1['loss']:.4f} accuracy={m1['accuracy']:.4f}")
    print(f"second model (incremental, resume_from=latest): {second}\n"
          f"  loss={m2['loss']:.4f} accuracy={m2['accuracy']:.4f}")


if __name__ == "__main__":
    main()

"""One training run's spec and stage results, as the stages return them today, for the lineage tests (the `sample`
fixture of tests/operators/lineage/conftest.py; other tests import it by name)."""

from __future__ import annotations

from datetime import datetime, timezone

from operators.jobspec.ownership import OWNER_KEY
from operators.launch.spec import validate_spec
from operators.lineage.record import build_record

TRAIN_VERSION = "a" * 64
VALIDATION_VERSION = "b" * 64
CODE_DIGEST = "sha256:" + "c" * 64
IMAGE_DIGEST = "sha256:" + "d" * 64
PARENT_MODEL = "s3://models/churn/churn-20260101-000000-abcd/output/model.tar.gz"


def sample_job(**fields) -> dict:
    raw = {"job_name": "churn-20260202-010203-beef", "base_job_name": "churn",
           "source_dir": "s3://code/churn/v3/", "entry_point": "train.py",
           "inputs": {"train": "s3://data/churn/train/", "validation": "cos://eu-data/churn/validation.csv"},
           "hyperparameters": {"lr": 0.01, "epochs": 3, "optimizer": "adam"},
           "output_path": "s3://models/churn", "resume_from": PARENT_MODEL, "instance_count": 2,
           "resources": {"cpu": 2, "memory": "4Gi", "gpu": 1}, "backend": "docker",
           "image_uri": "registry.example/churn:1.4", **fields}
    return {**validate_spec(raw).to_dict(), OWNER_KEY: "alice"}


def stage_results(cache_dir: str = "/ws/cache") -> dict:
    """What each stage returns today (operators/stages/*.py), for a run that succeeded."""
    return {
        "stage_code": {"code_dir": "/ws/jobs/churn/code", "files": 4, "bytes": 2048},
        "prefetch": {
            "train": {"entry": f"{cache_dir}/{TRAIN_VERSION}/data", "is_file": False, "uri": "s3://data/churn/train/",
                      "file_name": None},
            "validation": {"entry": f"{cache_dir}/{VALIDATION_VERSION}/data", "is_file": True,
                           "uri": "cos://eu-data/churn/validation.csv", "file_name": "validation.csv"},
        },
        "write_configs": {"hosts": ["algo-1", "algo-2"], "config_dir": "/ws/jobs/churn/input/config"},
        "restore": {"checkpoint_files": 0, "resumed_from": PARENT_MODEL},
        "launch": {"succeeded": True, "exit_code": 0, "metrics": {"loss": 0.25, "accuracy": 0.91},
                   "failure_class": None},
        "upload": {"status": "succeeded",
                   "model_uri": "s3://models/churn/churn-20260202-010203-beef/output/model.tar.gz",
                   "artifacts": {}},
    }


def sample_record(**overrides):
    results = stage_results()
    args = dict(dag_id="training_job", run_id="manual__2026-02-02T01:02:03", triggering_user="alice",
                code_digest=CODE_DIGEST, image_digest=IMAGE_DIGEST,
                channel_versions={"train": {"objects": 120, "bytes": 10_000_000}},
                versions={"python": "3.11.7", "airflow-training-jobs": "0.1.0"},
                created_at=datetime(2026, 2, 2, 1, 30, tzinfo=timezone.utc), **results)
    args.update(overrides)
    job = args.pop("job", None) or sample_job()
    return build_record(job, **args)

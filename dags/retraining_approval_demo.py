"""Approval before promotion, to try in a minute: the demo model (examples/logistic_regression) retrained on the data
the trigger names, gated on its loss, then promoted only if a person approves within 30 seconds (no answer: rejected).

    airflow dags trigger retrain_approval_demo --conf '{"require_approval": true}'
    # then Browse > Required actions (or the run's approve_promotion task): Approve, or Reject with a reason

Params `data` and `output_path` default to what `make demo` writes (demo-bucket/); the pointer is
`<output_path>/logreg-approval/latest.json`. Without require_approval the run promotes as any retraining run does.
A real retraining DAG is a config file with an `approval:` section (docs/templates.md); this one is built in Python
only so that its data and output are the trigger's (the suite's served-Airflow test runs it on its own files).
"""

import os

from operators.pipelines.config_files import parse_job_config
from operators.pipelines.retraining import retraining_dag

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _params():
    from airflow.sdk import Param

    return {
        "data": Param(os.path.join(_REPO, "demo-bucket", "data", "train") + "/", type="string",
                      title="Training data", description="The train channel: a prefix or directory ending in /"),
        "output_path": Param(os.path.join(_REPO, "demo-bucket", "approval"), type="string", title="Output path",
                             description="Models and the latest-model pointer go here"),
    }


_config = parse_job_config({
    "dag_id": "retrain_approval_demo",
    "description": "The demo model retrained and promoted only if a person approves (30 s, then rejected)",
    "tags": ["example"],
    "job": {
        "base_job_name": "logreg-approval",
        "source_dir": os.path.join(_REPO, "examples", "logistic_regression"),
        "entry_point": "train.py",
        "hyperparameters": {"epochs": 3, "learning_rate": 0.5},
        "inputs": {"train": "{{ params.data }}"},
        "output_path": "{{ params.output_path }}",
        "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"},
                               {"Name": "accuracy", "Regex": "accuracy=([0-9.]+)"}],
        "max_run_seconds": 300,
    },
    # Every model that reaches this loss is put to a person, even one no better than the promoted model.
    "gate": {"objective": "loss", "threshold": 0.9, "better_than_current": False},
    "approval": {"required": False, "timeout": "30s", "on_timeout": "reject"},
}, os.path.abspath(__file__))

retrain_approval_demo = retraining_dag(_config, params=_params())

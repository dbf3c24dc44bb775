"""The write_configs stage: the runtime's input/config/ files from the spec, and no outcome left from an earlier try."""

from __future__ import annotations

import json
import os

from operators.stages.stage_code import StageCodeOperator
from operators.stages.write_configs import WriteConfigsOperator


def test_the_configs_carry_the_spec_and_an_earlier_attempts_outcome_is_cleared(local_job):
    job = local_job(hyperparameters={"epochs": 3, "lr": 0.1}, instance_count=2)
    code = StageCodeOperator(task_id="stage_code", job=job).execute({"run_id": "run-1"})
    root = os.path.dirname(code["code_dir"])
    os.makedirs(os.path.join(root, "output"), exist_ok=True)
    with open(os.path.join(root, "output", "success"), "w"):
        pass  # what an earlier attempt of this job left

    result = WriteConfigsOperator(task_id="write_configs", job=job, channels={}).execute({"run_id": "run-1"})

    assert len(result["hosts"]) == 2
    files = sorted(os.listdir(result["config_dir"]))
    assert {"hyperparameters.json", "resourceconfig.json", "inputdataconfig.json"} <= set(files)
    with open(os.path.join(result["config_dir"], "hyperparameters.json")) as handle:
        hyperparameters = json.load(handle)
    assert {k: str(v) for k, v in hyperparameters.items()} == {"epochs": "3", "lr": "0.1"}
    with open(os.path.join(result["config_dir"], "resourceconfig.json")) as handle:
        assert json.load(handle)["hosts"] == result["hosts"]
    assert not os.path.exists(os.path.join(root, "output", "success"))

"""The prefetch_data stage: each channel is fetched into the shared cache once, and the job sees it at input/data/."""

from __future__ import annotations

import os

from operators.settings import training_settings
from operators.stages.prefetch_data import PrefetchDataOperator
from operators.stages.stage_code import StageCodeOperator


def _prefetch(job: dict) -> dict:
    StageCodeOperator(task_id="stage_code", job=job).execute({"run_id": "run-1"})
    return PrefetchDataOperator(task_id="prefetch_data", job=job).execute({"run_id": "run-1"})


def test_a_channel_is_cached_once_and_each_job_sees_it_in_its_own_input_dir(tmp_path, local_job):
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("a,b\n1,2\n")
    first, second = local_job(inputs={"train": str(data)}), local_job(inputs={"train": str(data)})

    channels = _prefetch(first)
    again = _prefetch(second)

    assert channels["train"]["entry"] == again["train"]["entry"]  # one cache entry for both jobs
    for job in (first, second):
        root = training_settings().job_root(job["job_name"])
        with open(os.path.join(root, "input", "data", "train", "part-0.csv")) as handle:
            assert handle.read() == "a,b\n1,2\n"


def test_a_job_without_inputs_fetches_nothing(local_job):
    assert _prefetch(local_job()) == {}

"""A job on a local store for the engine's functions: local paths as URIs, a workspace of the test's own, settings built
here (no airflow.cfg read)."""

from __future__ import annotations

import uuid

import pytest

from operators.engine.context import JobContext
from operators.launch.spec import validate_spec
from operators.settings import TrainingSettings


@pytest.fixture
def make_context(tmp_path):
    def make(**fields) -> JobContext:
        code = tmp_path / "code"
        code.mkdir(exist_ok=True)
        (code / "train.py").write_text("print('training')\n")
        raw = {"job_name": f"engine-{uuid.uuid4().hex[:8]}", "source_dir": str(code), "entry_point": "train.py",
               "output_path": str(tmp_path / "models"), **fields}
        job = validate_spec(raw, default_backend="local", default_layout="ti").to_dict()
        return JobContext(job, dag_id="training_job", run_id="r1", settings=TrainingSettings(
            workspace=str(tmp_path / "workspace")))
    return make

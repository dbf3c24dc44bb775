"""A validated job spec for the stage tests: local code, inputs and output (the workspace is tests/conftest.py's)."""

from __future__ import annotations

import uuid

import pytest

from operators.launch.spec import validate_spec


@pytest.fixture
def local_job(tmp_path):
    """Makes a spec dict (what the validate task hands the stages) with its own job_name, code and output."""
    def make(**fields) -> dict:
        code = tmp_path / "code"
        code.mkdir(exist_ok=True)
        (code / "train.py").write_text("print('training')\n")
        raw = {"job_name": f"stage-{uuid.uuid4().hex[:10]}", "source_dir": str(code), "entry_point": "train.py",
               "output_path": str(tmp_path / "models"), **fields}
        return validate_spec(raw).to_dict()
    return make

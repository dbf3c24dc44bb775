"""The lineage tests' fixture `sample`: one training run's spec and stage results (lineage_samples.py)."""

from __future__ import annotations

import pytest

from tests.operators.lineage import lineage_samples


@pytest.fixture
def sample():
    """lineage_samples: sample.sample_job(), sample.stage_results(), sample.sample_record(**overrides), constants."""
    return lineage_samples

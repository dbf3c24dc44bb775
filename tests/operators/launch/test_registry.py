"""The launch registry and the spec accept the same backends, named in one place (operators/jobspec/backend_options.py)."""

from __future__ import annotations

import pytest

from operators.launch.registry import launcher_class
from operators.jobspec.backend_options import BACKENDS
from operators.jobspec.model import SpecError, validate_spec

SPEC = {"job_name": "j", "source_dir": "s3://bucket/code/", "output_path": "s3://bucket/models", "entry_point": "train.py"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_the_spec_accepts_has_a_launcher_of_that_name(backend):
    spec = validate_spec({**SPEC, "backend": backend})
    assert spec.backend == backend
    assert launcher_class(backend).backend == backend


def test_a_backend_nobody_registered_is_refused_by_the_spec_and_the_registry_alike():
    with pytest.raises(SpecError, match="backend"):
        validate_spec({**SPEC, "backend": "slurm"})
    with pytest.raises(ValueError, match="backend 'slurm' is not one of local, kubernetes, docker"):
        launcher_class("slurm")

"""The launch registry and the spec accept the same backends, named in one place (operators/jobspec/model.py BACKENDS)."""

from __future__ import annotations

import pytest

from operators.launch.registry import launcher_class, option_models
from operators.jobspec.model import BACKENDS, JobSpec, SpecError
from operators.launch.spec import validate_spec

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


def test_each_options_section_of_the_spec_is_a_backends_and_has_its_model():
    # The spec holds a backend's options as a JSON object; the backend's model (operators/launch/<backend>/options.py)
    # is what validate_spec checks it with, and the option names a launch accepts are that model's fields.
    from operators.launch.docker.options import OPTION_KEYS as DOCKER_KEYS
    from operators.launch.kubernetes.options import OPTION_KEYS as KUBERNETES_KEYS

    sections = {name for name in JobSpec.model_fields if name in BACKENDS}
    models = option_models()
    assert set(models) == sections == {"kubernetes", "docker"}
    assert (tuple(models["kubernetes"].model_fields), tuple(models["docker"].model_fields)) == (KUBERNETES_KEYS,
                                                                                                DOCKER_KEYS)

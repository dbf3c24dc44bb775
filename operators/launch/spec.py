"""The job spec as the platform validates a raw one (Params, --conf, a config file, the SDK's local mode): the spec's
own model (operators/jobspec/model.py) with each backend's options section checked by that backend's model, found
through the registry (the spec sits below the launch layer and imports no backend)."""

from __future__ import annotations

from typing import Any, Mapping

from operators.jobspec import model
from operators.jobspec.model import JobSpec
from operators.launch.registry import option_models


def validate_spec(raw: Mapping[str, Any], **defaults: Any) -> JobSpec:
    """operators.jobspec.model.validate_spec (the same defaults and SpecError) with every backend's options model."""
    return model.validate_spec(raw, option_models=option_models(), **defaults)

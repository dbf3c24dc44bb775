"""The spec validate_spec returned, read from its dict (JobSpec.to_dict()) without building the pydantic model: for a
data-plane step in the cluster (operators/engine/step.py), whose payload is that dict as the worker sent it.

Why not JobSpec.from_dict there: importing pydantic and building the spec's models costs ~0.25 s of CPU, a third of a
cache hit's step, and repeats a check the worker made on the very same dict before it submitted the step (the stage's
`op.spec` is JobSpec.from_dict(op.job), read to choose the step; the payload's "job" is op.job). The step's payload
is the platform's (the worker built it; a pod's environment cannot be changed after it is created), so the step takes
it as validated, as it takes its inputs. It still refuses a job name that is not a DNS-1123 label and a channel name
the model would refuse: those two become paths in the workspace the step writes, a check that costs nothing.

What the view reads from the dict: the fields whose JSON form is their value (strings, numbers, literals, dicts of
those). A field that holds a model (resources, reproduces, ...) is None when the dict says null; any other field,
property or method comes from the model, built from the dict on first use (then it is validated as from_dict does).
"""

from __future__ import annotations

from typing import Any, Mapping

from operators.jobspec.errors import SpecError
from operators.jobspec.names import CHANNEL_NAME, DNS1123_LABEL, MAX_JOB_NAME
from operators.jobspec.ownership import OWNER_KEY

# JobSpec's fields whose value is their JSON form (tests/operators/jobspec/test_validated.py compares each with the
# model's on several specs, and checks that every field of JobSpec is in one of these two sets).
PLAIN_FIELDS = frozenset({
    "job_name", "base_job_name", "tags", "source_dir", "entry_point", "command", "hyperparameters", "inputs",
    "output_path", "checkpoint_path", "resume_from", "connections", "instance_count", "processes_per_host", "backend",
    "image_uri", "layout", "max_run_seconds", "kubernetes", "docker",
})
# Fields that may hold a model (or a list or dict of models): read from the dict only when null.
MODEL_FIELDS = frozenset({"distribution", "resources", "environment", "metric_definitions", "reproduces"})


class ValidatedSpec:
    """A validated spec's dict read as a JobSpec (see the module's docstring). `model` is the JobSpec, built on first
    use of anything the dict alone does not answer."""

    def __init__(self, data: Mapping[str, Any]):
        self._data = {k: v for k, v in data.items() if k != OWNER_KEY}
        self._model = None
        name = self._data.get("job_name")
        if not isinstance(name, str) or len(name) > MAX_JOB_NAME or not DNS1123_LABEL.match(name):
            raise SpecError("job_name", f"{name!r} is not a DNS-1123 label (the worker validates it; a step's payload "
                                        "must carry the validated spec)")
        inputs = self._data.get("inputs") or {}
        if not isinstance(inputs, dict) or not all(isinstance(c, str) and CHANNEL_NAME.match(c) for c in inputs):
            raise SpecError("inputs", "channel names must be letters, digits, '_' or '-' (the worker validates them; "
                                      "a step's payload must carry the validated spec)")

    @property
    def model(self):
        """The JobSpec itself (pydantic), built from the dict on first use."""
        if self._model is None:
            from operators.jobspec.model import JobSpec  # lazy: pydantic, for what the dict alone does not answer

            self._model = JobSpec.from_dict(self._data)
        return self._model

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        data = self._data
        if name in PLAIN_FIELDS and name in data:
            return data[name]
        if name in MODEL_FIELDS and name in data and data[name] is None:
            return None
        return getattr(self.model, name)


__all__ = ["MODEL_FIELDS", "PLAIN_FIELDS", "ValidatedSpec"]

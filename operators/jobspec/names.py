"""The spec's names and the backends it accepts, in a module without pydantic: the model (operators/jobspec/model.py)
validates with them, and readers that never validate import them from here (the launch registry, a data-plane step's
view of the validated spec, operators/jobspec/validated.py)."""

from __future__ import annotations

import re

# The one list of backend names: the spec's `backend` field, the trigger form's dropdown and the launch registry.
BACKENDS = ("local", "kubernetes", "docker")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_JOB_NAME = 63

"""What the docker backend can do (operators/launch/declaration.py): blocking only (the engine is local to the worker,
nothing to hand to a triggerer), cache entries bind-mounted read-only at input/data/<channel>, ulimit fsize."""

from operators.launch.base import Capabilities
from operators.launch.declaration import BackendDeclaration

DECLARATION = BackendDeclaration(
    capabilities=Capabilities(deferrable=False, mounts_channels=True, caps_file_size=True),
)

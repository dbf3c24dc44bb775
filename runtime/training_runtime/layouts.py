"""Directory layouts of a job root (TI-ONE / SageMaker, PAI, ModelArts).

Public API, shared with the Airflow side that writes job roots::

    from training_runtime.layouts import layout_for, create_directories
    layout = layout_for("pai", "/workspace/jobs/my-job")
    create_directories(layout, channels=["train", "test"])
    layout.config_file("hyperparameters.json")

Every layout keeps ``input/config/``, ``input/data/<channel>/`` and ``output/``
(``output/data/``, ``output/failure``, ``output/success``) at the same place; they
differ in where the code, the model and the checkpoints live:

============  ==================  =====================  =======================
              ti / sagemaker      pai                    modelarts
============  ==================  =====================  =======================
root          /opt/ml             /ml                    /home/ma-user/modelarts
code (cwd)    code/               usercode/              user-job-dir/code/
model         model/              output/model/          output/model/
checkpoints   checkpoints/        output/checkpoints/    output/checkpoints/
============  ==================  =====================  =======================
"""

import os
from dataclasses import dataclass

LAYOUT_NAMES = ("ti", "sagemaker", "pai", "modelarts")
DEFAULT_LAYOUT = "ti"

#: The root each layout has inside a training container.
CONTAINER_ROOTS = {
    "ti": "/opt/ml",
    "sagemaker": "/opt/ml",
    "pai": "/ml",
    "modelarts": "/home/ma-user/modelarts",
}

# Relative to the root: (code, model, checkpoints). Everything else is shared.
_DIFFERENCES = {
    "ti": ("code", "model", "checkpoints"),
    "sagemaker": ("code", "model", "checkpoints"),
    "pai": ("usercode", os.path.join("output", "model"), os.path.join("output", "checkpoints")),
    "modelarts": (
        os.path.join("user-job-dir", "code"),
        os.path.join("output", "model"),
        os.path.join("output", "checkpoints"),
    ),
}


@dataclass(frozen=True)
class Layout:
    """Absolute paths of one job root in one layout."""

    name: str
    root: str
    code_dir: str
    config_dir: str
    data_dir: str
    model_dir: str
    checkpoint_dir: str
    output_dir: str
    output_data_dir: str
    failure_file: str
    success_file: str

    def channel_dir(self, channel):
        """``input/data/<channel>`` (the channel name is not validated here)."""
        return os.path.join(self.data_dir, channel)

    def config_file(self, filename):
        """A file in ``input/config/``, e.g. ``config_file("resourceconfig.json")``."""
        return os.path.join(self.config_dir, filename)

    @property
    def job_dir(self):
        """The directory holding the code directory (ModelArts ``MA_JOB_DIR``)."""
        return os.path.dirname(self.code_dir)


def layout_for(name, root=None):
    """The :class:`Layout` called ``name`` rooted at ``root``.

    ``root`` defaults to the layout's container root (``/opt/ml``, ``/ml``,
    ``/home/ma-user/modelarts``); a relative root is made absolute.
    Raises ``ValueError`` for an unknown layout name.
    """
    if name not in _DIFFERENCES:
        raise ValueError(
            "unknown layout %r: use one of %s" % (name, ", ".join(LAYOUT_NAMES))
        )
    root = os.path.abspath(os.fspath(root if root is not None else CONTAINER_ROOTS[name]))
    code, model, checkpoints = _DIFFERENCES[name]
    output_dir = os.path.join(root, "output")
    return Layout(
        name=name,
        root=root,
        code_dir=os.path.join(root, code),
        config_dir=os.path.join(root, "input", "config"),
        data_dir=os.path.join(root, "input", "data"),
        model_dir=os.path.join(root, model),
        checkpoint_dir=os.path.join(root, checkpoints),
        output_dir=output_dir,
        output_data_dir=os.path.join(output_dir, "data"),
        failure_file=os.path.join(output_dir, "failure"),
        success_file=os.path.join(output_dir, "success"),
    )


def create_directories(layout, channels=()):
    """Create every directory of ``layout`` (and ``input/data/<channel>`` for
    each of ``channels``); existing directories are left as they are."""
    for path in (
        layout.code_dir,
        layout.config_dir,
        layout.data_dir,
        layout.model_dir,
        layout.checkpoint_dir,
        layout.output_dir,
        layout.output_data_dir,
    ):
        os.makedirs(path, exist_ok=True)
    for channel in channels:
        os.makedirs(layout.channel_dir(channel), exist_ok=True)
    return layout

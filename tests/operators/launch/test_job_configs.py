"""input/config/ of a job root on a retry: the script of an earlier attempt may have left links there."""

from __future__ import annotations

import os

import pytest
from training_runtime.layouts import layout_for

from operators.launch.local.launcher import LocalLauncherHook
from operators.launch.job_configs import write_job_configs
from operators.launch.spec import validate_spec

SPEC = {"job_name": "j", "source_dir": "s3://b/code/", "output_path": "s3://b/models", "entry_point": "train.py",
        "hyperparameters": {"lr": 0.1}}


def _victim(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root-owned\n")
    os.chmod(victim, 0o600)
    return victim


def test_a_linked_config_dir_is_refused_and_nothing_is_written_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "job"
    (root / "input").mkdir(parents=True)
    (root / "input" / "config").symlink_to(outside)
    with pytest.raises(OSError, match="input/config in job root .* is a symbolic link"):
        write_job_configs(validate_spec(SPEC), layout_for("ti", str(root)), LocalLauncherHook(sandbox="none"))
    assert os.listdir(outside) == []

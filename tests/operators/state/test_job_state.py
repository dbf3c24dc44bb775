"""The job's state directory: worker-only, beside the job roots, never inside one."""

from __future__ import annotations

import os
import stat

import pytest

from operators.state.job_state import ensure_state_dir, remove_state_dir, state_dir
from operators.settings import TrainingSettings


def test_the_state_directory_is_private_and_outside_every_job_root(tmp_path):
    settings = TrainingSettings(workspace=str(tmp_path / "ws"))
    path = ensure_state_dir(settings.workspace, "job-1", "launch")
    for directory in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory
    assert not os.path.realpath(path).startswith(os.path.realpath(settings.jobs_dir) + os.sep)
    remove_state_dir(settings.workspace, "job-1")
    assert not os.path.exists(state_dir(settings.workspace, "job-1"))


@pytest.mark.parametrize("name", ["", ".", "..", "a/../../etc", "x\0y"])
def test_a_name_that_would_leave_the_state_area_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="cannot name a state directory"):
        state_dir(str(tmp_path), name)

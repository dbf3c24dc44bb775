"""The restore stage on a retry: the job root holds what the earlier attempt's script left, links included."""

from __future__ import annotations

import os

from operators.settings import training_settings
from operators.launch.spec import validate_spec
from operators.stages.restore import RestoreOperator


def test_restored_checkpoints_are_never_written_through_links_an_earlier_attempt_left(tmp_path):
    remote = tmp_path / "remote-ckpt"
    (remote / "cron").mkdir(parents=True)
    (remote / "cron" / "job").write_text("* * * * * root run-me\n")
    (remote / "step.txt").write_text("5")
    outside = tmp_path / "etc-cron.d"
    outside.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("root-owned\n")
    spec = validate_spec({"job_name": "restore-links", "source_dir": "s3://b/code/", "entry_point": "train.py",
                          "output_path": "s3://b/models", "checkpoint_path": str(remote)})
    checkpoints = os.path.join(training_settings().job_root(spec.job_name), "checkpoints")
    os.makedirs(checkpoints)
    os.symlink(outside, os.path.join(checkpoints, "cron"))  # a download into cron/ would land in outside/
    os.symlink(victim, os.path.join(checkpoints, "step.txt"))

    result = RestoreOperator(task_id="restore", job=spec.to_dict()).execute({})

    assert result["checkpoint_files"] == 2
    assert os.listdir(outside) == [] and victim.read_text() == "root-owned\n"
    assert not os.path.islink(os.path.join(checkpoints, "cron"))
    with open(os.path.join(checkpoints, "cron", "job")) as handle:
        assert handle.read() == "* * * * * root run-me\n"

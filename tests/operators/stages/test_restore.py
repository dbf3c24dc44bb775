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


def test_latest_never_resumes_from_another_owners_run_whatever_its_name(tmp_path):
    """The issue's attack: bob's `demo-evil` in alice's output_path, newer than her model, is not her `latest`."""
    import io
    import tarfile

    from operators.state.owner_records import OwnerRecord, record_job_area
    from operators.storage.hook import ObjectStorageHook

    models = tmp_path / "models"
    for job, owner in (("demo-1", "alice"), ("demo-evil", "bob")):
        record_job_area(ObjectStorageHook(), str(models), job, OwnerRecord(owner, "training_job", "demo", "job", job))
        (models / job / "output").mkdir(parents=True)
        with tarfile.open(models / job / "output" / "model.tar.gz", "w:gz") as tar:
            info = tarfile.TarInfo("who.txt")
            info.size = len(job)
            tar.addfile(info, io.BytesIO(job.encode()))
        os.utime(models / job / "output" / "model.tar.gz", (1e9 + len(job), 1e9 + len(job)))  # demo-evil: newer
    spec = validate_spec({"job_name": "demo-2", "base_job_name": "demo", "source_dir": "s3://b/code/",
                          "entry_point": "train.py", "output_path": str(models), "resume_from": "latest"})

    os.makedirs(training_settings().job_root("demo-2"))  # stage_code made it
    result = RestoreOperator(task_id="restore", job={**spec.to_dict(), "owner": "alice"}).execute({})

    assert result["resumed_from"] == f"{models}/demo-1/output/model.tar.gz"
    channel = os.path.join(training_settings().job_root("demo-2"), "input", "data", "model", "who.txt")
    with open(channel) as handle:
        assert handle.read() == "demo-1"
    spec = validate_spec({**spec.to_dict(), "job_name": "demo-3"})
    os.makedirs(training_settings().job_root("demo-3"))
    assert RestoreOperator(task_id="restore", job={**spec.to_dict(), "owner": "carol"}).execute({})[
        "resumed_from"] is None


def test_a_run_recorded_below_a_claimed_checkpoint_path_since_its_claim_stops_the_restore(tmp_path):
    """validate_spec's claim and the other owner's upload raced: restore, the last stage before the job can write to
    the checkpoint_path, finds the other owner's run below it and fails in one line."""
    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    from operators.state.owner_records import OwnerRecord, claim, record_uri
    from operators.storage.hook import ObjectStorageHook

    shared = tmp_path / "shared"
    claim(ObjectStorageHook(), "checkpoint_path", str(shared), OwnerRecord("bob", "training_job", "x", "checkpoints"))
    # alice's upload checked the locations above its job area just before bob's claim, and recorded it just after
    ObjectStorageHook().write_bytes(record_uri(f"{shared}/demo-1"),
                                    OwnerRecord("alice", "training_job", "demo", "job", "demo-1").to_bytes())
    spec = validate_spec({"job_name": "restore-race", "source_dir": "s3://b/code/", "entry_point": "train.py",
                          "output_path": "s3://b/models", "checkpoint_path": str(shared)})
    os.makedirs(training_settings().job_root(spec.job_name))
    with pytest.raises(AirflowFailException) as err:
        RestoreOperator(task_id="restore", job={**spec.to_dict(), "owner": "bob"}).execute({})
    assert str(err.value).startswith(f"invalid job spec: checkpoint_path: {shared} (at demo-1/.training-owner.json) "
                                     "lies in user 'alice''s run")
    assert not os.listdir(os.path.join(training_settings().job_root(spec.job_name)))

"""Checkpoint sync against real files and the real local store: the checkpoint dir is the tenant's, so links in it
(to secret files, to directories, at the dir itself) are never uploaded; regular files are."""

from __future__ import annotations

import logging
import os

from operators.staging.checkpoints import CheckpointSync
from operators.storage.hook import ObjectStorageHook

SECRET = b"JWT_SECRET=do-not-leak\n"


def _uploaded(dest) -> dict[str, bytes]:
    return {str(p.relative_to(dest)): p.read_bytes() for p in sorted(dest.rglob("*")) if p.is_file()}


def test_links_in_the_checkpoint_dir_are_skipped_with_a_warning_and_regular_files_sync(tmp_path, caplog):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "airflow-secrets.env").write_bytes(SECRET)
    root = tmp_path / "job"
    ckpt = root / "checkpoints"
    (ckpt / "epoch1").mkdir(parents=True)
    (ckpt / "epoch1" / "model.pt").write_bytes(b"weights")
    (ckpt / "x").symlink_to(secrets / "airflow-secrets.env")
    (ckpt / "epoch1" / "etc").symlink_to(secrets)
    os.mkfifo(ckpt / "pipe")
    dest = tmp_path / "remote"
    sync = CheckpointSync(ObjectStorageHook(), str(ckpt), str(dest), job_root=str(root))
    with caplog.at_level(logging.WARNING):
        assert sync.sync_once() == 1
    assert _uploaded(dest) == {"epoch1/model.pt": b"weights"}
    warnings = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for name in ("checkpoints/x", "checkpoints/epoch1/etc", "checkpoints/pipe"):
        assert f"Skipped {name} " in warnings
    caplog.clear()
    assert sync.sync_once() == 0  # unchanged: nothing uploaded again
    assert "Skipped" not in caplog.text  # each link is named once, not at every periodic pass


def test_a_linked_checkpoint_dir_uploads_nothing(tmp_path, caplog):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "airflow-secrets.env").write_bytes(SECRET)
    root = tmp_path / "job"
    root.mkdir()
    (root / "checkpoints").symlink_to(secrets)
    dest = tmp_path / "remote"
    sync = CheckpointSync(ObjectStorageHook(), str(root / "checkpoints"), str(dest), job_root=str(root))
    with caplog.at_level(logging.WARNING):
        assert sync.sync_once() == 0
    assert not dest.exists()
    assert "checkpoints in job root" in caplog.text and "symbolic link" in caplog.text


def test_files_named_like_the_platforms_owner_records_are_never_synced(tmp_path, caplog):
    """The checkpoint sync is the one upload whose names the tenant picks: a job that writes an owner record (or the
    output area's owner list) into its checkpoint dir would claim a location, or a run, for whoever it names."""
    root = tmp_path / "job"
    ckpt = root / "checkpoints"
    (ckpt / "demo-evil" / ".training-owners").mkdir(parents=True)
    forged = b'{"owner": "alice", "dag_id": "training_job", "lineage": "demo", "kind": "job"}'
    (ckpt / ".training-owner.json").write_bytes(forged)
    (ckpt / "demo-evil" / ".training-owner.json").write_bytes(forged)
    (ckpt / "demo-evil" / ".training-owners" / "alice.json").write_bytes(b'{"owner": "alice"}')
    (ckpt / "latest.pt").write_bytes(b"weights")
    dest = tmp_path / "remote"
    sync = CheckpointSync(ObjectStorageHook(), str(ckpt), str(dest), job_root=str(root))
    with caplog.at_level(logging.WARNING):
        assert sync.sync_once() == 1
    assert _uploaded(dest) == {"latest.pt": b"weights"}
    assert "skipped demo-evil/.training-owner.json: .training-owner.json is the name of the platform's owner " \
           "records" in caplog.text
    caplog.clear()
    assert sync.sync_once() == 0 and "skipped" not in caplog.text  # named once

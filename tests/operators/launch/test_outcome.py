"""The Airflow side's outcome markers in a job root the tenant wrote: links are never read or written through."""

from __future__ import annotations

import os

from operators.launch.outcome import read_failure_reason, record_failure

SECRET = "JWT_SECRET=do-not-leak\n"


def _world(tmp_path):
    outside = tmp_path / "root-owned"
    outside.write_text(SECRET)
    os.chmod(outside, 0o600)
    root = tmp_path / "job"
    (root / "output").mkdir(parents=True)
    return root, outside


def test_a_failure_file_linked_to_a_secret_is_not_read(tmp_path):
    root, outside = _world(tmp_path)
    (root / "output" / "failure").symlink_to(outside)
    assert read_failure_reason(str(root)) is None
    (root / "output" / "failure").unlink()
    (root / "output" / "failure").write_text("ValueError: lr\n")
    assert read_failure_reason(str(root)) == "ValueError: lr"


def test_record_failure_replaces_links_instead_of_writing_through_them(tmp_path):
    root, outside = _world(tmp_path)
    (root / "output" / "failure").symlink_to(outside)
    (root / "output" / "success").symlink_to(outside)
    record_failure(str(root), "timed out")
    assert outside.read_text() == SECRET and (outside.stat().st_mode & 0o777) == 0o600
    assert (root / "output" / "failure").read_text() == "timed out\n" and not (root / "output" / "failure").is_symlink()
    assert not os.path.lexists(root / "output" / "success")


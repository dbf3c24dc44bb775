"""Who a Docker training container runs as, the job root given to it, and its credentials file (real files, real
chown: the tests run as root where `make test` runs; the ownership test says so when it cannot)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from operators.launch.docker import access


def test_root_users_are_recognised_and_numeric_ids_parsed():
    assert all(access.is_root(user) for user in ("", None, "0", "root", "0:0", "root:1000"))
    assert not any(access.is_root(user) for user in ("1000", "1000:0", "ml"))
    assert access.numeric_ids("1000:1000") == (1000, 1000)
    assert access.numeric_ids("1000") == (1000, None)
    assert access.numeric_ids("ml") is None and access.numeric_ids("1000:ml") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root (make test runs as root)")
def test_the_job_root_is_given_to_the_container_user_links_not_followed(tmp_path):
    root = tmp_path / "job"
    (root / "code" / "pkg").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print(1)")
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    (root / "code" / "link").symlink_to(outside)
    assert access.give_job_root(str(root), 1000, 1000) == 5  # job, code, pkg, train.py, the link itself
    for path in (root, root / "code", root / "code" / "pkg", root / "code" / "train.py"):
        assert (path.stat().st_uid, path.stat().st_gid) == (1000, 1000)
    assert os.lstat(root / "code" / "link").st_uid == 1000
    assert outside.stat().st_uid == 0  # the link's target stays where it was
    assert access.give_job_root(str(root), 1000, 1000) == 0  # a retry changes nothing


def test_the_credentials_file_is_readable_by_its_owner_only_and_removed(tmp_path):
    directory = access.secrets_dir(str(tmp_path), "job-a")
    path = access.write_secrets(directory, {"API_TOKEN": "t0k"}, 1000 if os.geteuid() == 0 else None, 1000)
    assert json.loads(open(path).read()) == {"API_TOKEN": "t0k"}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o400
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    if os.geteuid() == 0:
        assert os.stat(path).st_uid == 1000
    assert not [name for name in os.listdir(directory) if name.endswith(".partial")]
    access.remove_secrets(directory)
    assert not os.path.exists(directory)


def test_credentials_are_read_from_airflow_variables_with_one_clear_line_when_missing(monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_TRAINING_UNIT_TOKEN", "s3cr3t")
    assert access.secret_values({"API_TOKEN": "training_unit_token"}) == {"API_TOKEN": "s3cr3t"}
    assert access.secret_values(None) == {}
    with pytest.raises(ValueError, match="secret_variables.API_TOKEN: cannot read Airflow Variable 'nope_absent'"):
        access.secret_values({"API_TOKEN": "nope_absent"})
    with pytest.raises(ValueError, match="'API-TOKEN' is not an environment variable name"):
        access.secret_values({"API-TOKEN": "training_unit_token"})
    with pytest.raises(ValueError, match="must be an object"):
        access.secret_values(["API_TOKEN"])

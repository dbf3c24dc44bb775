"""sagemaker_submit_directory: fetched into an empty code dir (S3 on the loopback store,
local directory or tarball), refused clearly when it cannot be, never written outside."""

import io
import json
import tarfile
from pathlib import Path

import pytest

from training_runtime import s3

RECORD = "import os; open(os.path.join(os.environ['SM_OUTPUT_DATA_DIR'], 'ran'), 'w').write('yes')\n"


def _tarball(path: Path, members: dict) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _sagemaker_job(make_job, submit):
    job = make_job(layout="sagemaker", entry_point=None, code={},
                   hyperparameters={"sagemaker_program": '"train.py"', "sagemaker_submit_directory": json.dumps(submit)})
    return job


def test_members_outside_the_code_dir_are_skipped(make_job, tmp_path):
    tarball = _tarball(tmp_path / "src.tar.gz", {"train.py": RECORD, "../escaped.txt": "x", "/abs.txt": "y"})
    job = _sagemaker_job(make_job, str(tarball))
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert Path(job.layout.output_data_dir, "ran").read_text() == "yes"
    assert not (job.root / "escaped.txt").exists() and not Path("/abs.txt").exists()
    assert "skipping archive member '../escaped.txt'" in result.stderr


def test_a_missing_s3_object_is_refused_naming_it(make_job, moto_server, tmp_path):
    client = moto_server.client()
    client.create_bucket(Bucket="submit-missing")
    job = _sagemaker_job(make_job, "s3://submit-missing/no/such/sourcedir.tar.gz")
    env = {"S3_ENDPOINT_URL": moto_server.url, "AWS_ACCESS_KEY_ID": moto_server.access_key,
           "AWS_SECRET_ACCESS_KEY": moto_server.secret_key}
    assert job.run(env=env).returncode == 2
    assert job.failure.startswith(
        "sagemaker_submit_directory s3://submit-missing/no/such/sourcedir.tar.gz: 404")


def test_wrong_credentials_are_refused_by_the_store(make_job, moto_server, tmp_path):
    client = moto_server.client()
    client.create_bucket(Bucket="submit-auth")
    client.put_object(Bucket="submit-auth", Key="src.tar.gz",
                      Body=_tarball(tmp_path / "s.tar.gz", {"train.py": RECORD}).read_bytes())
    job = _sagemaker_job(make_job, "s3://submit-auth/src.tar.gz")
    env = {"S3_ENDPOINT_URL": moto_server.url, "AWS_ACCESS_KEY_ID": moto_server.access_key,
           "AWS_SECRET_ACCESS_KEY": "wrong"}
    assert job.run(env=env).returncode == 2
    assert "403" in job.failure and "check the URI and the credentials" in job.failure
    assert "wrong" not in job.failure  # no secret in the failure reason


def test_signed_download_of_a_key_with_spaces(moto_server, tmp_path):
    client = moto_server.client()
    client.create_bucket(Bucket="submit-keys")
    client.put_object(Bucket="submit-keys", Key="dir/a b+c.tar.gz", Body=b"payload")
    env = {"S3_ENDPOINT_URL": moto_server.url, "AWS_ACCESS_KEY_ID": moto_server.access_key,
           "AWS_SECRET_ACCESS_KEY": moto_server.secret_key}
    target = tmp_path / "out"
    assert s3.download("s3://submit-keys/dir/a b+c.tar.gz", str(target), env) == 7
    assert target.read_bytes() == b"payload"


def test_a_submit_directory_that_does_not_exist_is_refused(make_job, tmp_path):
    job = _sagemaker_job(make_job, str(tmp_path / "nowhere"))
    assert job.run().returncode == 2
    assert "is neither an s3:// URI nor an existing local directory or file" in job.failure


@pytest.mark.parametrize("layout", ["ti", "pai"])
def test_only_the_sagemaker_layout_fetches(make_job, tmp_path, layout):
    tarball = _tarball(tmp_path / "src.tar.gz", {"other.py": "x"})
    job = make_job(layout=layout, hyperparameters={"sagemaker_submit_directory": json.dumps(str(tarball))})
    assert job.run().returncode == 0
    assert not Path(job.layout.code_dir, "other.py").exists()

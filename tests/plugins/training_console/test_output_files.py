"""A job's output prefix on its page (training_console/output_files.py): listed, downloaded and previewed, from real
files and the loopback S3 server of tests/conftest.py; what the job left there is untrusted."""

import asyncio
import json
import os
from urllib.parse import parse_qs, urlparse
from urllib.request import urlopen

import pytest
from fastapi import HTTPException
from fastapi.responses import RedirectResponse

from training_console import output_files


def body(response) -> bytes:
    async def read():
        return b"".join([chunk async for chunk in response.body_iterator])

    return asyncio.run(read())


@pytest.fixture
def local_job(tmp_path):
    out = tmp_path / "models" / "j1" / "output"
    (out / "eval").mkdir(parents=True)
    (out / "model.tar.gz").write_bytes(b"\x1f\x8b model")
    (out / "eval" / "report.json").write_text(json.dumps({"accuracy": 0.93}))
    (out / "eval" / "page.html").write_text("<script>alert(1)</script>")
    (out / "notes.txt").write_text("line\n" * 20000)  # 100 KB: the preview is cut
    return {"job_name": "j1", "output_path": str(tmp_path / "models")}, out


def test_every_file_under_the_output_prefix_is_listed_with_its_size(local_job):
    spec, out = local_job
    listing = output_files.list_files(spec)
    assert listing["prefix"] == f"{spec['output_path']}/j1/output/" and not listing["truncated"]
    assert {f["path"]: f["size"] for f in listing["files"]} == {
        "eval/page.html": 25, "eval/report.json": 18, "model.tar.gz": 8, "notes.txt": 100000}


def test_json_and_text_are_previewed_inline_and_capped(local_job):
    spec, _ = local_job
    report = output_files.preview(spec, "eval/report.json")
    assert report["kind"] == "json" and json.loads(report["text"]) == {"accuracy": 0.93} and not report["truncated"]
    notes = output_files.preview(spec, "notes.txt")
    assert len(notes["text"]) == output_files.PREVIEW_BYTES and notes["truncated"] and notes["size"] == 100000
    with pytest.raises(HTTPException) as err:
        output_files.preview(spec, "model.tar.gz")
    assert err.value.status_code == 415 and "download it instead" in err.value.detail


def test_a_download_is_an_attachment_a_browser_never_renders(local_job):
    spec, _ = local_job
    response = output_files.download(spec, "eval/page.html")
    assert response.media_type == "application/octet-stream"
    assert response.headers["content-disposition"] == 'attachment; filename="j1-eval-page.html"'
    assert response.headers["x-content-type-options"] == "nosniff"
    assert body(response) == b"<script>alert(1)</script>"


def test_no_name_reaches_beyond_the_jobs_prefix_or_through_a_link(local_job, tmp_path):
    spec, out = local_job
    (tmp_path / "models" / "j2" / "output").mkdir(parents=True)
    (tmp_path / "models" / "j2" / "output" / "secret.txt").write_text("another job's")
    (tmp_path / "airflow.cfg").write_text("[database]\nsql_alchemy_conn = secret")
    os.symlink(tmp_path / "airflow.cfg", out / "link.txt")  # planted by the job
    os.symlink(tmp_path / "models" / "j2" / "output", out / "other")
    assert "link.txt" not in {f["path"] for f in output_files.list_files(spec)["files"]}
    for name, status in [("../../j2/output/secret.txt", 400), ("/etc/passwd", 400), ("link.txt", 404),
                         ("other/secret.txt", 404), ("eval/../notes.txt", 400)]:
        for call in (output_files.download, output_files.preview):
            with pytest.raises(HTTPException) as err:
                call(spec, name)
            assert err.value.status_code == status, (name, call)


def test_a_job_without_uploaded_output_lists_nothing(tmp_path):
    assert output_files.list_files({"job_name": "j9", "output_path": str(tmp_path)})["files"] == []


def test_object_storage_files_are_listed_previewed_and_linked_presigned(object_store, storage_connections,
                                                                       moto_server):
    bucket = object_store.bucket()
    object_store.put(bucket, "models/j1/output/eval/report.json", b'{"f1": 0.8}')
    object_store.put(bucket, "models/j1/output/model.tar.gz", b"model bytes")
    object_store.put(bucket, "models/j10/output/other.txt", b"not this job's")  # a neighbour sharing the prefix
    spec = {"job_name": "j1", "output_path": f"cos://{bucket}/models"}
    assert sorted(f["path"] for f in output_files.list_files(spec)["files"]) == ["eval/report.json", "model.tar.gz"]
    assert json.loads(output_files.preview(spec, "eval/report.json")["text"]) == {"f1": 0.8}
    response = output_files.download(spec, "model.tar.gz")
    assert isinstance(response, RedirectResponse)
    url = response.headers["location"]
    assert "X-Amz-Signature" in parse_qs(urlparse(url).query) and moto_server.secret_key not in url
    with urlopen(url, timeout=30) as followed:
        assert followed.read() == b"model bytes"
    with pytest.raises(HTTPException) as err:
        output_files.download(spec, "../j10/output/other.txt")
    assert err.value.status_code == 400

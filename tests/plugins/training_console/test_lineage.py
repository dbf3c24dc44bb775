"""A job's Lineage panel data (training_console/lineage.py): the record the upload stage kept in the job's state
directory, and the chain of parent models read from their published (tenant-writable) records, followed only to jobs
the user may read and stopped, with one line, at whatever is wrong with a published record. Real records
(operators/lineage/record.py), real files, the real storage hook; the page itself in a browser:
tests/integration/test_ui_browser.py."""

from __future__ import annotations

import json
import os

import pytest

from operators.launch.spec import validate_spec
from operators.lineage.record import RunReference, build_record, write_record
from training_console import lineage
from training_console.jobs import Job

DONE = {s: ("success", None, None, 1) for s in ("validate_spec", "stage_code", "launch_training", "upload_artifacts")}
DATA = "a" * 64


@pytest.fixture
def world(tmp_path, monkeypatch):
    workspace = tmp_path / "workspace"
    monkeypatch.setenv("AIRFLOW__TRAINING__WORKSPACE", str(workspace))
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    return tmp_path


def spec(tmp, name: str, resume_from: str | None = None) -> dict:
    conf = {"job_name": name, "source_dir": str(tmp / "code"), "entry_point": "train.py",
            "inputs": {"train": str(tmp / "data") + "/"}, "output_path": str(tmp / "models"),
            "hyperparameters": {"lr": 0.1}}
    if resume_from:
        conf["resume_from"] = resume_from
    return validate_spec(conf).to_dict()


def model(tmp, name: str) -> str:
    return f"{tmp / 'models'}/{name}/output/model.tar.gz"


def record(tmp, name: str, run_id: str, parent: str | None = None, **extra):
    return build_record(spec(tmp, name, parent), dag_id="training_job", run_id=run_id, versions={"python": "3.12"},
                        code_digest="sha256:" + name[0] * 64, image_digest=extra.pop("image_digest", None),
                        prefetch={"train": {"entry": f"/ws/cache/{DATA}/data"}},
                        channel_versions={"train": {"objects": 3, "bytes": 300}},
                        restore={"resumed_from": parent} if parent else None, triggering_user="alice", **extra)


def publish(tmp, rec) -> None:
    """The published copy beside the model (what the upload stage uploads; the tenant can rewrite it)."""
    out = tmp / "models" / rec.job_name / "output"
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.tar.gz").write_bytes(b"model")
    (out / "lineage.json").write_text(rec.to_json())


def job(tmp, name: str, run_id: str, parent: str | None = None, dag_id: str = "training_job") -> Job:
    return Job(dag_id, run_id, -1, "", tis=dict(DONE), validated=spec(tmp, name, parent))


@pytest.fixture
def chain(world):
    """first <- middle <- last: first and middle published, last's record kept."""
    first = record(world, "first", "r1")
    middle = record(world, "middle", "r2", parent=model(world, "first"))
    last = record(world, "last", "r3", parent=model(world, "middle"), image_digest="sha256:" + "d" * 64,
                  reproduces=RunReference(job_name="middle", dag_id="training_job", run_id="r2"))
    for rec in (first, middle):
        publish(world, rec)
    write_record(str(world / "workspace"), last)
    jobs = [job(world, "first", "r1"), job(world, "middle", "r2", model(world, "first")),
            job(world, "last", "r3", model(world, "middle"))]
    return world, jobs


def test_the_panel_shows_what_made_the_model_and_the_chain_back_to_the_first_model(chain):
    world, jobs = chain
    data = lineage.job_lineage(jobs[2], lineage.ReadableJobs(lambda: jobs))
    record = data["record"]
    assert data["note"] is None and record["job_name"] == "last"
    assert record["code"]["digest"] == "sha256:" + "l" * 64
    assert record["channels"]["train"] == {"uri": str(world / "data") + "/", "data_version": DATA, "objects": 3,
                                           "bytes": 300}
    assert record["image"] == {"backend": "local", "name": None, "digest": "sha256:" + "d" * 64}
    assert record["airflow"]["triggering_user"] == "alice" and record["hyperparameters"] == {"lr": 0.1}
    assert [p["job_name"] for p in data["parents"]] == ["middle", "first"]
    assert data["parents"][0]["job"] == {"dag_id": "training_job", "run_id": "r2", "map_index": -1,
                                         "job_name": "middle"}
    assert data["parents"][0]["record"]["code_digest"] == "sha256:" + "m" * 64
    assert data["parents"][1]["record"]["data_versions"] == {"train": DATA}
    assert data["chain_note"] is None  # it reached the first model
    assert data["reproduces"]["job"]["run_id"] == "r2"


def test_a_parent_the_user_may_not_read_is_named_and_not_followed(chain):
    world, jobs = chain
    readable = lineage.ReadableJobs(lambda: [j for j in jobs if j.run_id != "r2"])  # middle's DAG: not theirs
    data = lineage.job_lineage(jobs[2], readable)
    [parent] = data["parents"]
    assert parent["model_uri"] == model(world, "middle") and parent["job"] is None and parent["record"] is None
    assert data["chain_note"] == f"{model(world, 'middle')} is not the model of a job you may read: its lineage is " \
                                 "not followed"
    assert "first" not in json.dumps(data["parents"]) and data["reproduces"]["job"] is None


@pytest.mark.parametrize("hostile, says", [
    (lambda path: path.write_bytes(b"{" + b" " * (lineage.MAX_RECORD_BYTES + 10) + b"}"), "is larger than"),
    (lambda path: path.write_text("<html>not json</html>"), "not a lineage record: document: Invalid JSON"),
    (lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 2})),
     "not a lineage record: schema_version"),
    (lambda path: path.write_text(json.dumps({"job_name": "x"})), "not a lineage record"),
])
def test_a_hostile_published_parent_record_stops_the_chain_with_one_line(chain, hostile, says):
    world, jobs = chain
    hostile(world / "models" / "middle" / "output" / "lineage.json")
    data = lineage.job_lineage(jobs[2], lineage.ReadableJobs(lambda: jobs))
    assert data["record"]["job_name"] == "last"  # the job's own lineage is shown all the same
    [parent] = data["parents"]
    assert parent["job_name"] == "middle" and parent["record"] is None
    note = data["chain_note"]
    assert note.startswith(str(world / "models/middle/output/lineage.json") + ": ") and says in note, note
    assert note.endswith("the chain stops there") and "\n" not in note and len(note) < 600


def test_a_cyclic_chain_stops_where_it_comes_back(chain):
    world, jobs = chain
    cyclic = record(world, "middle", "r2", parent=model(world, "last"))  # middle claims it was made from last
    publish(world, cyclic)
    publish(world, record(world, "last", "r3", parent=model(world, "middle")))
    data = lineage.job_lineage(jobs[2], lineage.ReadableJobs(lambda: jobs))
    assert [p["job_name"] for p in data["parents"]] == ["middle", "last"]
    assert "appears twice in the chain (a cycle)" in data["chain_note"]


def test_a_chain_longer_than_the_cap_is_cut(world):
    names = [f"gen{i:02d}" for i in range(lineage.MAX_CHAIN + 3)]
    jobs = []
    for i, name in enumerate(names):
        parent = model(world, names[i - 1]) if i else None
        publish(world, record(world, name, f"r{i}", parent=parent))
        jobs.append(job(world, name, f"r{i}", parent))
    write_record(str(world / "workspace"), record(world, names[-1], f"r{len(names) - 1}", parent=model(world, names[-2])))
    data = lineage.job_lineage(jobs[-1], lineage.ReadableJobs(lambda: jobs))
    assert len(data["parents"]) == lineage.MAX_CHAIN
    assert data["chain_note"] == f"the chain is cut after {lineage.MAX_CHAIN} parents"


def test_a_published_record_that_is_a_link_is_not_followed(chain):
    world, jobs = chain
    published = world / "models" / "middle" / "output" / "lineage.json"
    published.unlink()
    os.symlink(world / "workspace" / "state" / "last" / "lineage.json", published)  # another job's kept record
    data = lineage.job_lineage(jobs[2], lineage.ReadableJobs(lambda: jobs))
    assert data["parents"][0]["record"] is None and data["chain_note"].endswith("the chain stops there")


def test_a_job_without_a_kept_record_says_so_in_one_line(chain):
    world, jobs = chain
    data = lineage.job_lineage(jobs[1], lineage.ReadableJobs(lambda: jobs))  # middle's record was only published
    assert data["record"] is None and data["note"] == lineage.NO_RECORD and data["parents"] == []
    # a later run that reuses the name: the state directory's record is the earlier run's, not shown as its own
    again = job(world, "last", "r4", model(world, "middle"))
    assert lineage.job_lineage(again, lineage.ReadableJobs(lambda: jobs))["note"] == lineage.NO_RECORD
    # the upload ran in the cluster's data plane: its kept copy is there; the note says so and where it is published
    published = str(world / "models/middle/output/lineage.json")
    jobs[1].record_result("upload_artifacts", {"status": "succeeded", "lineage_uri": published})
    note = lineage.job_lineage(jobs[1], lineage.ReadableJobs(lambda: jobs))["note"]
    assert note.startswith("no lineage record kept where this Airflow keeps job state") and note.endswith(published)


def test_the_route_is_the_apps_with_the_same_read_permission_as_the_job_page():
    from training_console.app import app

    routes = {getattr(r, "path", None): r for r in app.routes}
    route = routes["/api/jobs/{dag_id}/{run_id}/{map_index}/lineage"]
    page = routes["/api/jobs/{dag_id}/{run_id}/{map_index}"]
    checks = lambda r: [d.call.__qualname__ for d in r.dependant.dependencies]  # noqa: E731
    assert "refuse_cross_site" in " ".join(checks(route))  # the app's web boundary
    assert [c for c in checks(page) if "requires_access_dag" in c] == \
        [c for c in checks(route) if "requires_access_dag" in c] != []

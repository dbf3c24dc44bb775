"""The platform's owner records beside the outputs (local storage here; object storage goes through the same hook):
resume_from "latest" resolves among the same owner's runs of the same lineage only; a checkpoint_path is claimed by
one owner; what another owner's runs wrote is refused to a reader unless shared, and to a writer always."""

from __future__ import annotations

import json
import os
import time

import pytest

from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import parse_ownership
from operators.state.owner_records import (
    OwnerRecord,
    check_read,
    check_spec_locations,
    check_write,
    claim,
    latest_model,
    record_job_area,
)
from operators.storage.hook import ObjectStorageHook

NO_POLICY = parse_ownership("", {}, {})


@pytest.fixture
def storage():
    return ObjectStorageHook(connections={})


def run(storage, output_path, job_name: str, owner: str, lineage: str = "demo", model: bytes = b"m") -> str:
    """What the upload stage leaves: the job area's record, then its model."""
    record_job_area(storage, str(output_path), job_name, OwnerRecord(owner, "training_job", lineage, "job", job_name))
    path = output_path / job_name / "output" / "model.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model)
    time.sleep(0.01)  # the next model is newer
    return str(path)


def refused(call, *args) -> str:
    with pytest.raises(SpecError) as err:
        call(*args)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_latest_is_the_newest_model_of_the_same_owner_and_lineage(storage, tmp_path):
    models = tmp_path / "models"
    first = run(storage, models, "demo-1", "alice")
    run(storage, models, "demo-evil", "bob")  # newest, same prefix, another owner
    run(storage, models, "demo-2", "alice", lineage="other")  # alice's, another lineage under the same prefix
    orphan = models / "demo-3" / "output" / "model.tar.gz"  # no record: nobody's
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"?")
    assert latest_model(storage, str(models), "demo", "demo-9", "alice") == f"{models}/demo-1/output/model.tar.gz"
    assert first.endswith("demo-1/output/model.tar.gz")
    assert latest_model(storage, str(models), "demo", "demo-9", "bob") == f"{models}/demo-evil/output/model.tar.gz"
    assert latest_model(storage, str(models), "demo", "demo-9", "carol") is None
    assert latest_model(storage, str(models), "demo", "demo-1", "alice") is None  # never the running job's own


def test_a_record_written_by_another_owners_job_name_cannot_claim_a_run(storage, tmp_path):
    models = tmp_path / "models"
    run(storage, models, "demo-1", "alice")
    # bob's job with alice's job name (after its lease is gone): the upload stage refuses to record over it
    line = refused(record_job_area, storage, str(models), "demo-1",
                   OwnerRecord("bob", "training_job", "demo", "job", "demo-1"))
    assert line.startswith(f"output_path: {models}/demo-1/ lies in user 'alice''s run demo-1 (DAG 'training_job', "
                           "lineage 'demo'); a location belongs to one owner")


def test_a_checkpoint_path_is_claimed_by_its_first_owner(storage, tmp_path):
    ckpt = str(tmp_path / "ckpt-alice")
    alice = OwnerRecord("alice", "training_job", "demo", "checkpoints")
    claim(storage, "checkpoint_path", ckpt, alice)
    claim(storage, "checkpoint_path", ckpt, alice)  # again: hers
    line = refused(claim, storage, "checkpoint_path", ckpt, OwnerRecord("bob", "training_job", "demo", "checkpoints"))
    assert line == (f"checkpoint_path: {ckpt} lies in user 'alice''s checkpoint_path (DAG 'training_job', lineage "
                    "'demo'); a location belongs to one owner: user 'bob' may not write there; use a path of your "
                    "own")
    # below it, above it (it would sync over her records), and inside her runs: all refused
    bob = OwnerRecord("bob", "training_job", "demo", "checkpoints")
    assert refused(claim, storage, "checkpoint_path", ckpt + "/sub", bob).startswith("checkpoint_path: ")
    assert "would sync over them" in refused(claim, storage, "checkpoint_path", str(tmp_path), bob)
    run(storage, tmp_path / "models", "demo-1", "alice")
    assert refused(claim, storage, "checkpoint_path", str(tmp_path / "models" / "demo-1" / "output"), bob) \
        .startswith(f"checkpoint_path: {tmp_path}/models/demo-1/output lies in user 'alice''s run demo-1")
    assert "would sync over them" in refused(claim, storage, "checkpoint_path", str(tmp_path / "models"), bob)
    claim(storage, "checkpoint_path", str(tmp_path / "ckpt-bob"), bob)


def test_another_owners_outputs_are_refused_to_a_reader_unless_shared(storage, tmp_path):
    models = tmp_path / "models"
    model = run(storage, models, "demo-1", "alice")
    run(storage, models, "demo-evil", "bob")
    for uri in (model, f"{models}/demo-1/output/", f"{models}/demo-1"):
        line = refused(check_read, storage, NO_POLICY, "inputs.steal", uri, "bob")
        assert line.startswith(f"inputs.steal: {uri} lies in user 'alice''s run demo-1 (DAG 'training_job', lineage "
                               "'demo'); user 'bob' may not read another owner's outputs unless an admin shares them "
                               "([training] output_shares)")
    # the output area as a whole holds alice's runs
    line = refused(check_read, storage, NO_POLICY, "resume_from", str(models), "bob")
    assert line == (f"resume_from: {models} lies in the output area {models}/, which holds runs of user 'alice'; "
                    "user 'bob' may read only its own runs there (<output_path>/<job_name>/) unless an admin shares "
                    "them ([training] output_shares)")
    # each reads its own run, even inside an area others share
    check_read(storage, NO_POLICY, "resume_from", f"{models}/demo-evil/output/model.tar.gz", "bob")
    check_read(storage, NO_POLICY, "inputs.m", model, "alice")
    shared = parse_ownership("", {}, {"alice": ["bob"]})
    check_read(storage, shared, "inputs.m", model, "bob")
    check_read(storage, shared, "inputs.all", str(models), "bob")
    # a location with no records is nobody's output
    (tmp_path / "data").mkdir()
    check_read(storage, NO_POLICY, "inputs.train", str(tmp_path / "data"), "bob")


def test_a_damaged_record_refuses_everyone(storage, tmp_path):
    area = tmp_path / "models" / "demo-1"
    area.mkdir(parents=True)
    (area / ".training-owner.json").write_text("not json")
    assert "whose owner record cannot be read" in refused(check_read, storage, NO_POLICY, "inputs.x", str(area), "a")
    assert "whose owner record cannot be read" in refused(check_write, storage, "output_path", str(area), "a")


def test_a_spec_is_checked_field_by_field(storage, tmp_path):
    models = tmp_path / "models"
    run(storage, models, "demo-1", "alice")
    claim(storage, "checkpoint_path", str(tmp_path / "ckpt"), OwnerRecord("alice", "training_job", "demo",
                                                                          "checkpoints"))
    (tmp_path / "code").mkdir()
    spec = {"job_name": "demo-evil", "output_path": str(models), "source_dir": str(tmp_path / "code"),
            "inputs": {}, "checkpoint_path": None, "resume_from": None}
    bob = OwnerRecord("bob", "training_job", "demo", "job", "demo-evil")
    check_spec_locations(storage, NO_POLICY, spec, "bob", bob)  # his own job area in a shared output_path
    cases = {"checkpoint_path": {"checkpoint_path": str(tmp_path / "ckpt")},
             "inputs.steal": {"inputs": {"steal": f"{models}/demo-1/output/"}},
             "resume_from": {"resume_from": f"{models}/demo-1/output/model.tar.gz"},
             "job_name": {"job_name": "demo-1"},
             "output_path": {"output_path": f"{models}/demo-1/output"}}
    for field, change in cases.items():
        assert refused(check_spec_locations, storage, NO_POLICY, {**spec, **change}, "bob", bob).startswith(
            f"{field}: ")
    # the claim of a new checkpoint_path is recorded for its owner
    check_spec_locations(storage, NO_POLICY, {**spec, "checkpoint_path": str(tmp_path / "ckpt-bob")}, "bob", bob)
    with open(os.path.join(tmp_path, "ckpt-bob", ".training-owner.json")) as f:
        assert json.load(f)["owner"] == "bob"


def test_a_prefix_the_jobs_identity_may_not_read_has_no_record_it_could_have_written(storage, tmp_path):
    """A bucket policy scoped to the job's prefixes answers 403 above them: this identity never wrote a record there,
    and what it cannot read it cannot read as a channel either, so the walk goes on (a 403 is not a refusal)."""
    from operators.storage.errors import StorageError

    class Scoped:
        def __init__(self, allowed):
            self.allowed = allowed

        def _check(self, uri):
            if not uri.startswith(self.allowed):
                raise StorageError(f"access denied to {uri}", permanent=True)

        def exists(self, uri):
            self._check(uri)
            return storage.exists(uri)

        def list_objects(self, uri):
            self._check(uri)
            return storage.list_objects(uri)

        def is_prefix(self, uri):
            return storage.is_prefix(uri)

        def read_bytes(self, uri):
            return storage.read_bytes(uri)

    models = tmp_path / "models"
    run(storage, models, "demo-1", "alice")
    scoped = Scoped(str(models))
    check_read(scoped, NO_POLICY, "inputs.m", f"{models}/demo-1/output/", "alice")
    assert refused(check_read, scoped, NO_POLICY, "inputs.m", f"{models}/demo-1/output/", "bob").startswith(
        "inputs.m: ")

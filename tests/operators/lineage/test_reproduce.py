"""Reproduce: the conf that reproduces a run from its lineage record, the record of a reproduction naming the run it
reproduces, and validate_spec's check of a reproduction against the kept record (exists, is the owner's, same pins)."""

from __future__ import annotations

import pytest

from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import OWNER_KEY, parse_ownership
from operators.launch.spec import validate_spec
from operators.lineage.record import RunReference, record_path, write_record
from operators.lineage.reproduce import ReproduceError, check_reproduced_run, reproduction_conf


def test_the_conf_is_the_runs_spec_less_its_name_and_owner_with_the_records_pins(sample):
    record, job = sample.sample_record(), sample.sample_job()
    conf = reproduction_conf(record, job)
    assert "job_name" not in conf and OWNER_KEY not in conf
    assert conf["reproduces"] == {
        "job_name": job["job_name"], "dag_id": "training_job", "run_id": "manual__2026-02-02T01:02:03",
        "lineage_uri": record.published_uri, "code_digest": sample.CODE_DIGEST,
        "data_versions": {"train": sample.TRAIN_VERSION, "validation": sample.VALIDATION_VERSION},
        "image_digest": sample.IMAGE_DIGEST, "allow_changed_data": False}
    assert conf["hyperparameters"] == {"lr": 0.01, "epochs": 3, "optimizer": "adam"}
    assert conf["image_uri"] == "registry.example/churn:1.4" and conf["source_dir"] == "s3://code/churn/v3/"
    assert conf["resume_from"] == sample.PARENT_MODEL  # the model it resumed from
    # it is a spec the platform takes as it is (the trigger form's Params, then validate_spec)
    spec = validate_spec({**conf, "job_name": "churn-repro"})
    assert spec.reproduces.code_digest == sample.CODE_DIGEST and spec.inputs == job["inputs"]


def test_a_run_resumed_from_latest_is_reproduced_from_the_model_it_found(sample):
    job = sample.sample_job(resume_from="latest")
    conf = reproduction_conf(sample.sample_record(job=job), job)
    assert conf["resume_from"] == sample.PARENT_MODEL


def test_a_reproduction_of_a_reproduction_names_the_run_it_reproduces_now(sample):
    first = sample.sample_record()
    again = sample.sample_job(job_name="churn-repro-1", reproduces=reproduction_conf(first, sample.sample_job())["reproduces"])
    record = sample.sample_record(job=again)
    assert record.reproduces == RunReference(job_name=first.job_name, dag_id="training_job",
                                             run_id="manual__2026-02-02T01:02:03", lineage_uri=first.published_uri)
    assert reproduction_conf(record, again)["reproduces"]["job_name"] == "churn-repro-1"


@pytest.mark.parametrize("change, words", [
    (dict(code_digest=None), "records no code digest"),
    (dict(channel_versions={"train": {"data_version": None}}, prefetch={}), "channel train: job"),
])
def test_a_run_whose_record_lacks_a_pin_cannot_be_reproduced(sample, change, words):
    with pytest.raises(ReproduceError, match=words) as refused:
        reproduction_conf(sample.sample_record(**change), sample.sample_job())
    assert "\n" not in str(refused.value)


def test_an_expired_sdk_archive_cannot_be_reproduced(sample, tmp_path):
    archive = tmp_path / "staging" / "code" / "alice" / ("e" * 64 + ".tar.gz")
    job = sample.sample_job(source_dir=str(archive))
    with pytest.raises(ReproduceError, match="is gone"):
        reproduction_conf(sample.sample_record(job=job), job)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"kept")
    assert reproduction_conf(sample.sample_record(job=job), job)["source_dir"] == str(archive)


# -- validate_spec's check ------------------------------------------------------------------------------------------

def _kept(sample, workspace, **overrides):
    record = sample.sample_record(**overrides)
    write_record(str(workspace), record)
    return record


def _reproduction(sample, record, **pins):
    conf = reproduction_conf(record, sample.sample_job())
    conf["reproduces"].update(pins)
    return validate_spec({**conf, "job_name": "churn-repro"})


def test_a_reproduction_of_the_owners_kept_run_passes(sample, tmp_path):
    record = _kept(sample, tmp_path)
    assert check_reproduced_run(_reproduction(sample, record), str(tmp_path), "alice") == record


def test_a_plain_job_is_not_checked(sample, tmp_path):
    plain = {k: v for k, v in sample.sample_job().items() if k != OWNER_KEY}
    assert check_reproduced_run(validate_spec(plain), str(tmp_path), "alice") is None


def test_a_run_without_a_kept_record_is_refused(sample, tmp_path):
    spec = _reproduction(sample, sample.sample_record())  # its record was never kept in this workspace
    with pytest.raises(SpecError, match=r"^reproduces.job_name: no run of job 'churn-20260202-010203-beef'"):
        check_reproduced_run(spec, str(tmp_path), "alice")


def test_another_users_run_is_refused_unless_an_admin_shares_it(sample, tmp_path):
    record = _kept(sample, tmp_path)
    with pytest.raises(SpecError, match="^reproduces.job_name: job .* is not a run of user 'bob'"):
        check_reproduced_run(_reproduction(sample, record), str(tmp_path), "bob")
    shared = parse_ownership("", {}, {"alice": ["bob"]})
    assert check_reproduced_run(_reproduction(sample, record), str(tmp_path), "bob", shared) == record


def test_a_dag_owned_run_is_reproduced_only_by_its_dag(sample, tmp_path):
    record = _kept(sample, tmp_path, job={**sample.sample_job(), OWNER_KEY: "dag:retrain_churn"})
    with pytest.raises(SpecError, match="is not a run of user 'alice'"):
        check_reproduced_run(_reproduction(sample, record), str(tmp_path), "alice")
    assert check_reproduced_run(_reproduction(sample, record), str(tmp_path), "dag:retrain_churn") == record


def test_pins_other_than_the_records_are_refused(sample, tmp_path):
    record = _kept(sample, tmp_path)
    other = "sha256:" + "0" * 64
    with pytest.raises(SpecError, match="^reproduces.code_digest: is 'sha256:0+' but job"):
        check_reproduced_run(_reproduction(sample, record, code_digest=other), str(tmp_path), "alice")
    with pytest.raises(SpecError, match="^reproduces.data_versions.train: is '0+' but"):
        check_reproduced_run(_reproduction(sample, record, data_versions={"train": "0" * 64,
                                                                          "validation": sample.VALIDATION_VERSION}),
                             str(tmp_path), "alice")


def test_an_unreadable_kept_record_is_refused_in_one_line(sample, tmp_path):
    record = _kept(sample, tmp_path)
    with open(record_path(str(tmp_path), record.job_name), "w") as out:
        out.write('{"schema_version": 99}')
    with pytest.raises(SpecError, match="lineage record cannot be read") as refused:
        check_reproduced_run(_reproduction(sample, record), str(tmp_path), "alice")
    assert "\n" not in str(refused.value)

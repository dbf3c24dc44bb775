"""Who owns a run and what its owner may read and write, on the URIs alone: the admin's output roots (`{user}` and
`{team}` templates, local and object storage alike), teams and shares. Each refusal is one line naming the field."""

from __future__ import annotations

import pytest

from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import (
    OwnershipPolicy,
    check_reserved_names,
    normal_uri,
    owner_segment,
    parse_ownership,
    read_locations,
    run_owner,
    write_locations,
)


def policy(roots="s3://models/{user}/, /srv/models/{user}/, s3://teams/{team}/", teams=None, shares=None):
    return parse_ownership(roots, teams or {"churn": ["alice", "carol"]}, shares or {})


def refusal(pol: OwnershipPolicy, owner: str, locations) -> str:
    with pytest.raises(SpecError) as err:
        pol.check_roots(owner, locations)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_run_is_its_triggering_users_or_else_its_dags():
    assert run_owner("alice", "training_job") == "alice"
    assert run_owner(None, "training_job") == run_owner("", "training_job") == "dag:training_job"
    assert run_owner("dag_test", "training_job") == "dag:training_job"  # what Airflow records for `dags test`
    # a DAG's segment can never be a user's: no plain user name starts with "_"
    assert owner_segment("dag:retrain_x") == "_dag_retrain_x"
    assert owner_segment("alice") == "alice" and owner_segment("../x").startswith("u-")


def test_writes_go_under_the_owners_own_roots_only():
    pol = policy()
    pol.check_roots("alice", [("output_path", "s3://models/alice/churn"), ("checkpoint_path", "s3://teams/churn/ck/"),
                              ("output_path", "/srv/models/alice/x")])
    line = refusal(pol, "bob", [("output_path", "s3://models/alice/churn")])
    assert line == ("output_path: s3://models/alice/churn is outside the output roots of user 'bob' "
                    "(s3://models/bob/, /srv/models/bob/); write under one of them ([training] output_roots)")
    # a prefix that merely starts like the user's root is not under it
    assert refusal(pol, "alice", [("checkpoint_path", "s3://models/alice2/ck")]).startswith("checkpoint_path: ")
    # a team root is its members' only
    assert refusal(pol, "bob", [("checkpoint_path", "s3://teams/churn/ck")]).startswith("checkpoint_path: ")
    # a run nobody triggered writes under its DAG's segment
    pol.check_roots("dag:nightly", [("output_path", "s3://models/_dag_nightly/m")])


def test_reading_another_owners_root_needs_a_share():
    pol = policy()
    line = refusal(pol, "bob", [("inputs.steal", "s3://models/alice/churn/")])
    assert line == ("inputs.steal: s3://models/alice/churn/ is under the output root of user 'alice', which is not "
                    "shared with user 'bob'; read your own outputs, or ask an admin to share them "
                    "([training] output_shares)")
    assert refusal(pol, "bob", [("resume_from", "/srv/models/alice/j/output/model.tar.gz")]).startswith(
        "resume_from: /srv/models/alice/j/output/model.tar.gz is under the output root of user 'alice'")
    # a location holding every user's root is nobody's to read
    assert refusal(pol, "alice", [("inputs.all", "s3://models/")]).startswith(
        "inputs.all: s3://models/ holds the outputs of every owner under s3://models/;")
    # data outside the roots is not an output: anyone reads it
    pol.check_roots("bob", [("inputs.train", "s3://datasets/train/"), ("source_dir", "/srv/code/x")])
    # a team member reads the team's outputs; a share opens one owner's outputs to another
    pol.check_roots("carol", [("inputs.m", "s3://teams/churn/m/")])
    shared = policy(shares={"alice": ["bob"], "team:churn": ["dag:nightly"]})
    shared.check_roots("bob", [("inputs.m", "s3://models/alice/churn/")])
    shared.check_roots("dag:nightly", [("inputs.m", "s3://models/carol/x/"), ("inputs.t", "s3://teams/churn/x")])
    assert refusal(shared, "dave", [("inputs.m", "s3://models/alice/churn/")]).startswith("inputs.m: ")
    everyone = policy(shares={"alice": ["*"]})
    everyone.check_roots("dave", [("inputs.m", "s3://models/alice/churn/")])


def test_without_roots_the_uris_alone_refuse_nothing():
    parse_ownership("", {}, {}).check_roots("bob", [("output_path", "s3://anything/"), ("inputs.x", "/data/")])


def test_local_roots_compare_resolved_paths(tmp_path):
    real = tmp_path / "real"
    (real / "alice").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    pol = parse_ownership(f"{real}/{{user}}/", {}, {})
    assert refusal(pol, "bob", [("inputs.x", f"{link}/alice/")]).startswith(f"inputs.x: {link}/alice/ is under the "
                                                                             "output root of user 'alice'")
    assert normal_uri("S3://B/x") == "s3://B/x/"


@pytest.mark.parametrize("roots, problem", [
    ("s3://models/", "must hold exactly one of {user}, {team}"),
    ("s3://models/x{user}/", "the placeholder must be a whole path segment"),
    ("s3://models/{user}/{team}/", "must hold exactly one of"),
])
def test_a_malformed_root_names_the_setting(roots, problem):
    with pytest.raises(ValueError) as err:
        parse_ownership(roots, {}, {})
    assert "[training] output_roots" in str(err.value) and problem in str(err.value)


def test_malformed_teams_or_shares_name_their_setting():
    with pytest.raises(ValueError, match=r"\[training\] teams"):
        parse_ownership("", {"churn": "alice"}, {})
    with pytest.raises(ValueError, match=r"\[training\] output_shares"):
        parse_ownership("", {}, {"alice": "bob"})


def test_the_records_names_are_no_spec_location():
    with pytest.raises(SpecError) as err:
        check_reserved_names([("output_path", "s3://b/x/.training-owner.json/")])
    assert str(err.value) == ("output_path: s3://b/x/.training-owner.json/ names '.training-owner.json', the "
                              "platform's owner records; use another path")
    check_reserved_names([("output_path", "s3://b/x/owner.json")])


def test_a_spec_reads_its_code_channels_and_model_and_writes_its_outputs_and_checkpoints():
    spec = {"source_dir": "s3://c/", "inputs": {"a": "s3://d/"}, "resume_from": "latest", "output_path": "s3://o",
            "checkpoint_path": None}
    assert read_locations(spec) == [("source_dir", "s3://c/"), ("inputs.a", "s3://d/")]
    assert write_locations(spec) == [("output_path", "s3://o")]
    assert ("resume_from", "s3://m") in read_locations({**spec, "resume_from": "s3://m"})

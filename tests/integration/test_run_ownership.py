"""Runs belong to an owner (issue 47), through the session's served Airflow (tests/integration/airflow_server.py) and
its REST API, as the two `User`-role accounts alice and bob, in one output_path they both write to (what the shipped
config does): bob's `own-demo-evil`, newer than alice's model and named like her lineage, never becomes alice's
`resume_from: latest`; bob naming alice's checkpoint_path, her run's output (as a channel or as resume_from) or the
output area holding her runs is refused in the first task, in one line naming the field, before anything is staged."""

from __future__ import annotations

import tarfile
import textwrap

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAG_ID = "training_job"
# Writes who trained it and, when it resumed, whose model it resumed from (the `model` channel restore filled).
TRAIN = textwrap.dedent('''
    import os, pathlib, sys
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))  # --who <name>
    model = pathlib.Path(os.environ["TM_MODEL_DIR"])
    (model / "who.txt").write_text(args["--who"])
    resumed = pathlib.Path(os.environ["TM_INPUT_CONFIG_DIR"]).parent / "data" / "model" / "who.txt"
    (model / "resumed.txt").write_text(resumed.read_text() if resumed.is_file() else "")
''')


def conf(tmp_path, job_name: str, who: str, **extra) -> dict:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(TRAIN)
    return {"job_name": job_name, "base_job_name": "own-demo", "source_dir": str(code), "entry_point": "train.py",
            "hyperparameters": {"who": who}, "output_path": str(tmp_path / "models"), **extra}


def trigger(api, run_id: str, body: dict) -> None:
    status, run = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                           {"logical_date": None, "conf": body, "dag_run_id": run_id})
    assert status == 200, run


def succeeded(server, run_id: str) -> None:
    run = server.wait_for_run(DAG_ID, run_id, timeout=600)
    assert run["state"] == "success", server.task_states(DAG_ID, run_id)


def refusal(server, run_id: str) -> str:
    """The run failed in its first task, nothing staged: that task's one-line reason."""
    assert server.wait_for_run(DAG_ID, run_id, timeout=600)["state"] == "failed"
    states = server.task_states(DAG_ID, run_id)
    assert states[("validate_spec", -1)] == "failed" and states[("stage_code", -1)] == "upstream_failed", states
    status, body = server.api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/validate_spec/"
                                          "xcomEntries/failure_reason?deserialize=true")
    assert status == 200, body
    assert "\n" not in body["value"]
    return body["value"]


def read_model(path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {name: tar.extractfile(name).read().decode() for name in ("who.txt", "resumed.txt")}


def test_another_owners_run_is_never_latest_and_its_locations_are_refused(airflow_server, tmp_path):
    server = airflow_server
    alice, bob = server.user_api("alice"), server.user_api("bob")
    models, alice_ckpt = tmp_path / "models", tmp_path / "ckpt-alice"
    trigger(alice, "own-a1", conf(tmp_path, "own-demo-a1", "alice-1", checkpoint_path=str(alice_ckpt)))
    succeeded(server, "own-a1")
    first = models / "own-demo-a1" / "output" / "model.tar.gz"

    # bob, in the same output_path, under alice's lineage prefix: his own run is his to make, and newer than hers...
    trigger(bob, "own-evil", conf(tmp_path, "own-demo-evil", "bob-evil"))
    # ...but none of alice's locations is his to name
    attacks = {"checkpoint_path": {"checkpoint_path": str(alice_ckpt)},
               "inputs.steal": {"inputs": {"steal": f"{models}/own-demo-a1/output/"}},
               "resume_from": {"resume_from": str(first)},
               "inputs.everything": {"inputs": {"everything": f"{models}/"}}}
    for i, (field, change) in enumerate(attacks.items()):
        trigger(bob, f"own-refused-{i}", conf(tmp_path, f"own-refused-{i}", "bob", **change))
    succeeded(server, "own-evil")
    for i, field in enumerate(attacks):
        line = refusal(server, f"own-refused-{i}")
        assert line.startswith(f"invalid job spec: {field}: ") and "user 'alice'" in line, line
        assert not (server.home / "workspace" / "jobs" / f"own-refused-{i}").exists()
    assert refusal(server, "own-refused-0").endswith("a location belongs to one owner: user 'bob' may not write "
                                                     "there; use a path of your own")
    assert "may not read another owner's outputs unless an admin shares them ([training] output_shares)" in \
        refusal(server, "own-refused-1")
    assert read_model(models / "own-demo-evil" / "output" / "model.tar.gz")["who.txt"] == "bob-evil"
    assert not (alice_ckpt / "own-refused-0").exists() and sorted(p.name for p in alice_ckpt.iterdir()) == \
        [".training-owner.json"]

    # alice's next run resumes from her own model, not from bob's newer one
    trigger(alice, "own-a2", conf(tmp_path, "own-demo-a2", "alice-2", resume_from="latest"))
    succeeded(server, "own-a2")
    assert read_model(models / "own-demo-a2" / "output" / "model.tar.gz") == {"who.txt": "alice-2",
                                                                             "resumed.txt": "alice-1"}

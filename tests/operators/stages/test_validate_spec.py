"""The first task applies the admin's secret reference policy to every run, whoever created it: a reference the
policy does not allow for the run's DAG fails the task in one line naming the field and the reference, before the
secret is read; an allowed one passes."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest


class RecordingTI:
    """The task instance's XCom pushes, as the view will read them."""

    def __init__(self):
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def run_validate(dag_id: str, spec: dict, ti: RecordingTI | None = None, user: str | None = "alice",
                 dag_owned: bool = False) -> dict:
    from airflow.sdk import DAG

    from operators.stages.validate_spec import ValidateSpecOperator

    with DAG(dag_id, schedule=None):
        task = ValidateSpecOperator(task_id="validate_spec", spec=spec, dag_owned=dag_owned)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    context = {"params": {}, "run_id": "manual__1", "logical_date": when,
               "dag_run": SimpleNamespace(run_after=when, triggering_user_name=user), "ti": ti or RecordingTI()}
    return task.execute(context)


@pytest.fixture
def spec(tmp_path) -> dict:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    return {"job_name": "policy-check", "source_dir": str(code), "entry_point": "train.py",
            "output_path": str(tmp_path / "models"),
            "environment": {"TOKEN": {"variable": "ops_api_key"}, "PLAIN": "visible"}}


def test_a_reference_the_policy_does_not_allow_fails_naming_field_and_reference(spec, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.delenv("AIRFLOW__TRAINING__SECRET_REFERENCES", raising=False)
    # The Variable does not exist: the refusal comes before any attempt to read it.
    monkeypatch.delenv("AIRFLOW_VAR_OPS_API_KEY", raising=False)
    with pytest.raises(AirflowFailException) as err:
        run_validate("training_job", spec)
    message = str(err.value)
    assert message.startswith("invalid job spec: environment.TOKEN: Airflow Variable 'ops_api_key' may not be "
                              "referenced by runs of DAG 'training_job'")
    assert "\n" not in message


def test_an_allowed_reference_passes_for_its_dag_only(spec, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("AIRFLOW_VAR_OPS_API_KEY", "s3cr3t-value")
    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES",
                       json.dumps({"training_job": {"variables": ["ops_*"]}}))
    validated = run_validate("training_job", spec)
    assert validated["environment"]["TOKEN"] == {"variable": "ops_api_key"}
    assert "s3cr3t-value" not in json.dumps(validated)
    with pytest.raises(AirflowFailException, match="runs of DAG 'other_dag'"):
        run_validate("other_dag", spec)


def test_a_malformed_policy_fails_the_task_naming_the_setting(spec, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("AIRFLOW__TRAINING__SECRET_REFERENCES", '{"training_job": ["ops_api_key"]}')
    with pytest.raises(AirflowFailException, match=r"\[training\] secret_references entry 'training_job'"):
        run_validate("training_job", spec)


def test_a_refused_spec_records_its_reason_for_the_view(spec, tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("AIRFLOW__TRAINING__LOCAL_ROOTS", str(tmp_path / "allowed"))
    spec.pop("environment")
    ti = RecordingTI()
    with pytest.raises(AirflowFailException):
        run_validate("training_job", spec, ti)
    reason = ti.pushed["failure_reason"]
    assert reason.startswith(f"invalid job spec: source_dir: {spec['source_dir']} is outside the local roots")


def test_a_missing_local_entry_point_is_refused_before_anything_is_staged(spec, tmp_path, monkeypatch):
    import io
    import tarfile

    from airflow.sdk.exceptions import AirflowFailException

    spec.pop("environment")
    ti = RecordingTI()
    with pytest.raises(AirflowFailException, match=r"entry_point: trian\.py is not in source_dir"):
        run_validate("training_job", {**spec, "entry_point": "trian.py"}, ti)
    assert "trian.py is not in source_dir" in ti.pushed["failure_reason"]
    archive = tmp_path / "code.tar.gz"  # what the SDK uploads
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
    assert run_validate("training_job", {**spec, "source_dir": str(archive)})["entry_point"] == "train.py"
    with pytest.raises(AirflowFailException, match=r"entry_point: main\.py is not in the code archive"):
        run_validate("training_job", {**spec, "source_dir": str(archive), "entry_point": "main.py"})


def test_the_run_has_an_owner_and_another_owners_locations_are_refused_before_anything_is_staged(spec, tmp_path):
    """The issue's attacks, at the first task: bob naming alice's checkpoint_path, her run's output as a channel or as
    resume_from, is refused in one line naming the field; his own run in the same output_path is not."""
    from airflow.sdk.exceptions import AirflowFailException

    from operators.state.owner_records import OwnerRecord, record_job_area
    from operators.storage.hook import ObjectStorageHook

    spec.pop("environment")
    models = tmp_path / "models"
    validated = run_validate("training_job", {**spec, "job_name": "demo-1", "checkpoint_path": str(tmp_path / "ck")})
    assert validated["owner"] == "alice"
    assert json.loads((tmp_path / "ck" / ".training-owner.json").read_text())["owner"] == "alice"
    record_job_area(ObjectStorageHook(), str(models), "demo-1", OwnerRecord("alice", "training_job", "demo", "job"))
    (models / "demo-1" / "output").mkdir(parents=True)
    (models / "demo-1" / "output" / "model.tar.gz").write_bytes(b"alice's model")
    assert run_validate("training_job", {**spec, "job_name": "demo-evil"}, user="bob")["owner"] == "bob"
    attacks = {"checkpoint_path": {"checkpoint_path": str(tmp_path / "ck")},
               "inputs.steal": {"inputs": {"steal": f"{models}/demo-1/output/"}},
               "resume_from": {"resume_from": f"{models}/demo-1/output/model.tar.gz"}}
    for field, change in attacks.items():
        ti = RecordingTI()
        with pytest.raises(AirflowFailException) as err:
            run_validate("training_job", {**spec, "job_name": "demo-evil", **change}, ti, user="bob")
        assert str(err.value).startswith(f"invalid job spec: {field}: ") and "user 'alice'" in str(err.value)
        assert "\n" not in str(err.value) and ti.pushed["failure_reason"] == str(err.value)
    assert not (tmp_path / "ck" / "demo-evil").exists()


def test_a_run_nobody_triggered_is_its_dags_and_no_spec_names_its_own_owner(spec):
    from airflow.sdk.exceptions import AirflowFailException

    spec.pop("environment")
    assert run_validate("training_job", spec, user=None)["owner"] == "dag:training_job"  # dags test, a CLI trigger
    assert run_validate("retrain_x", spec, dag_owned=True)["owner"] == "dag:retrain_x"  # a retraining DAG's lineage
    with pytest.raises(AirflowFailException) as err:
        run_validate("training_job", {**spec, "owner": "alice"}, user="bob")
    assert str(err.value) == ("invalid job spec: owner: is set by the platform (the user who triggered the run, or its "
                              "DAG); remove it")


def test_the_admins_output_roots_are_applied_to_every_location(spec, tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    spec.pop("environment")
    monkeypatch.setenv("AIRFLOW__TRAINING__OUTPUT_ROOTS", f"{tmp_path}/roots/{{user}}/")
    assert run_validate("training_job", {**spec, "output_path": f"{tmp_path}/roots/alice/m"})["owner"] == "alice"
    with pytest.raises(AirflowFailException) as err:
        run_validate("training_job", {**spec, "output_path": f"{tmp_path}/roots/alice/m"}, user="bob")
    assert str(err.value).startswith(f"invalid job spec: output_path: {tmp_path}/roots/alice/m is outside the output "
                                     "roots of user 'bob'")
    (tmp_path / "roots" / "alice" / "m").mkdir(parents=True, exist_ok=True)
    with pytest.raises(AirflowFailException, match="inputs.x: .* is under the output root of user 'alice'"):
        run_validate("training_job", {**spec, "output_path": f"{tmp_path}/roots/bob/m",
                                      "inputs": {"x": f"{tmp_path}/roots/alice/m"}}, user="bob")
    monkeypatch.setenv("AIRFLOW__TRAINING__OUTPUT_SHARES", '{"alice": ["bob"]}')
    run_validate("training_job", {**spec, "output_path": f"{tmp_path}/roots/bob/m",
                                  "inputs": {"x": f"{tmp_path}/roots/alice/m"}}, user="bob")

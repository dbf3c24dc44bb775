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


def run_validate(dag_id: str, spec: dict, ti: RecordingTI | None = None) -> dict:
    from airflow.sdk import DAG

    from operators.stages.validate_spec import ValidateSpecOperator

    with DAG(dag_id, schedule=None):
        task = ValidateSpecOperator(task_id="validate_spec", spec=spec)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    context = {"params": {}, "run_id": "manual__1", "logical_date": when,
               "dag_run": SimpleNamespace(run_after=when, triggering_user_name="alice"), "ti": ti or RecordingTI()}
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

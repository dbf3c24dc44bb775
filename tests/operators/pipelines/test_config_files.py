import datetime as dt
import textwrap
from pathlib import Path

import pytest

from operators.pipelines.config_files import ApprovalRule, ConfigError, load_job_config, load_job_configs

REPO = Path(__file__).resolve().parents[3]

MINIMAL = """
job:
  source_dir: s3://bucket/code/
  entry_point: train.py
  output_path: s3://bucket/models
  metric_definitions: [{Name: loss, Regex: "loss=([0-9.]+)"}]
gate:
  objective: loss
"""


def write(tmp_path, text, name="churn.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_shipped_example_configs_load_and_point_into_the_repository():
    configs = load_job_configs(REPO / "dags" / "configs")
    assert [c.dag_id for c in configs] == ["retrain_logistic_regression"]
    example = configs[0]
    assert example.job["source_dir"] == str(REPO / "examples" / "logistic_regression")
    assert Path(example.job["source_dir"], example.job["entry_point"]).is_file()
    assert example.job["inputs"] == {"train": str(REPO / "demo-bucket" / "data" / "train") + "/"}
    assert example.job["output_path"] == str(REPO / "demo-bucket" / "retraining")
    assert example.cron == "0 3 * * *" and [a.name for a in example.assets] == ["logistic_regression_training_data"]
    assert example.gate.objective == "loss" and example.gate.threshold == 0.6 and example.resume_latest


def test_defaults(tmp_path):
    config = load_job_config(write(tmp_path, MINIMAL, "my churn.yml"))
    assert config.dag_id == "retrain_my_churn" and config.base_job_name == "retrain-my-churn"
    assert config.cron is None and config.assets == ()
    assert config.job["resume_from"] == "latest" and config.resume_latest
    assert config.gate.to_dict() == {"objective": "loss", "direction": "minimize", "threshold": None,
                                     "better_than_current": True, "min_improvement": 0.0, "on_reject": "skip"}
    assert config.start_date == dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) and config.retries == 0
    assert config.approval == ApprovalRule(required=False, timeout=dt.timedelta(hours=24), on_timeout="reject",
                                           approvers=())


def test_approval(tmp_path):
    text = MINIMAL + "approval: {required: true, timeout: 90m, on_timeout: approve, approvers: [olivia, ' omar ']}\n"
    rule = load_job_config(write(tmp_path, text)).approval
    assert rule == ApprovalRule(True, dt.timedelta(minutes=90), "approve", ("olivia", "omar"))
    for written, seconds in (("30", 30), ("45s", 45), ("2h", 7200), ("1d", 86400)):
        rule = load_job_config(write(tmp_path, MINIMAL + f"approval: {{timeout: {written}}}\n")).approval
        assert rule.timeout == dt.timedelta(seconds=seconds) and not rule.required


def test_relative_local_paths_are_relative_to_the_config_file(tmp_path):
    (tmp_path / "configs").mkdir()
    config = load_job_config(write(tmp_path / "configs", """
        start_date: 2026-03-01
        schedule: {assets: [{name: churn_data, uri: "s3://bucket/churn/"}], asset_condition: all}
        job:
          source_dir: ../code
          entry_point: train.py
          inputs: {train: ../data/train/, lookup: /abs/lookup.csv, remote: "s3://b/x/"}
          output_path: "file://{{ var.value.models }}"
          resume_from: null
        gate: {objective: auc, direction: maximize, threshold: 0.7, better_than_current: false}
    """))
    assert config.job["source_dir"] == str(tmp_path / "code")
    assert config.job["inputs"] == {"train": str(tmp_path / "data" / "train") + "/", "lookup": "/abs/lookup.csv",
                                    "remote": "s3://b/x/"}
    assert config.job["resume_from"] is None and not config.resume_latest
    assert config.start_date == dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    assert [(a.name, a.uri) for a in config.assets] == [("churn_data", "s3://bucket/churn/")]
    assert config.asset_condition == "all"


@pytest.mark.parametrize(
    "change, field, words",
    [
        ("colour: blue", "colour", "is not a config field"),
        ("dag_id: 'retrain churn'", "dag_id", "may only use letters"),
        ("schedule: {cron: '0 3 * *'}", "schedule.cron", "is not a cron expression"),
        ("schedule: {cron: '@fortnightly'}", "schedule.cron", "is not a cron expression"),
        ("schedule: {every: 1d}", "schedule.every", "is not a schedule field"),
        ("schedule: {assets: s3://b/d/}", "schedule.assets", "must be a list"),
        ("schedule: {assets: ['airflow://x']}", "schedule.assets[0]", "reserved"),
        ("schedule: {asset_condition: some}", "schedule.asset_condition", "not one of any, all"),
        ("start_date: next tuesday", "start_date", "is not a date"),
        ("retries: -1", "retries", "integer >= 0"),
        ("tags: churn", "tags", "list of strings"),
        ("approval: yes", "approval", "must be a mapping"),
        ("approval: {who: [olivia]}", "approval.who", "is not an approval field"),
        ("approval: {required: maybe}", "approval.required", "must be true or false"),
        ("approval: {timeout: soon}", "approval.timeout", "'soon' is not a duration > 0"),
        ("approval: {timeout: 0}", "approval.timeout", "is not a duration > 0"),
        ("approval: {on_timeout: retry}", "approval.on_timeout", "'retry' is not one of reject, approve"),
        ("approval: {approvers: olivia}", "approval.approvers", "list of user ids"),
    ],
)
def test_bad_top_level_fields_name_the_file_and_field(tmp_path, change, field, words):
    path = write(tmp_path, MINIMAL + change + "\n")
    with pytest.raises(ConfigError) as err:
        load_job_config(path)
    assert str(err.value).startswith(f"{path}: field '{field}': ") and words in str(err.value)


@pytest.mark.parametrize(
    "job_or_gate, field, words",
    [
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m, job_name: x}\ngate: {objective: l}",
         "job.job_name", "set base_job_name instead"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py}\ngate: {objective: l}", "job.output_path", "is required"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m, layout: k8s}\ngate: {objective: l}",
         "job.layout", "is not one of ti, sagemaker, pai, modelarts"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m, inputs: {'a b': s3://b/d/}}\n"
         "gate: {objective: l}", "job.inputs.a b", "channel names"),
        ("gate: {objective: l}", "job", "is required"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m}", "gate", "is required"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m}\ngate: {direction: minimize}",
         "gate.objective", "is required"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m}\n"
         "gate: {objective: l, direction: down}",
         "gate.direction", "'down' is not one of minimize, maximize"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m}\ngate: {objective: l, threshold: low}",
         "gate.threshold", "must be a number"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m}\n"
         "gate: {objective: l, better_than_current: false}", "gate", "passes every model"),
        ("job: {source_dir: s3://b/c/, entry_point: t.py, output_path: s3://b/m}\ngate: {objective: l, on_reject: x}",
         "gate.on_reject", "not one of skip, fail"),
    ],
)
def test_bad_job_or_gate_names_the_field(tmp_path, job_or_gate, field, words):
    path = write(tmp_path, job_or_gate + "\n")
    with pytest.raises(ConfigError) as err:
        load_job_config(path)
    assert str(err.value).startswith(f"{path}: field '{field}': ") and words in str(err.value), str(err.value)


def test_broken_yaml_says_where(tmp_path):
    path = write(tmp_path, "job:\n  source_dir: [unclosed\n")
    with pytest.raises(ConfigError, match=r"field '\(file\)': is not valid YAML at line 3"):
        load_job_config(path)


def test_a_directory_of_configs(tmp_path):
    assert load_job_configs(tmp_path / "missing") == []
    write(tmp_path, MINIMAL, "b.yaml")
    write(tmp_path, MINIMAL, "a.yml")
    (tmp_path / "README.md").write_text("not a config")
    assert [c.dag_id for c in load_job_configs(tmp_path)] == ["retrain_a", "retrain_b"]
    write(tmp_path, "dag_id: retrain_a\n" + MINIMAL, "c.yaml")
    with pytest.raises(ConfigError, match=r"c.yaml: field 'dag_id': 'retrain_a' is also the dag_id of .*a.yml"):
        load_job_configs(tmp_path)

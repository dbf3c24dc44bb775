import pytest

from operators.pipelines.config_files import AssetRef, GateRule, RetrainingConfig
from operators.pipelines.retraining import GateError, evaluate_gate, pointer_uri, schedule_for

CURRENT = {"model_uri": "s3://b/models/churn-1/output/model.tar.gz", "job_name": "churn-1",
           "metrics": {"loss": 0.40, "auc": 0.80}}


def rule(**overrides):
    return GateRule(**{"objective": "loss", **overrides}).to_dict()


def test_pointer_lives_next_to_the_jobs_of_the_base_name():
    assert pointer_uri("s3://b/models/", "churn") == "s3://b/models/churn/latest.json"
    assert pointer_uri("/data/models", "churn") == "/data/models/churn/latest.json"


def test_first_model_passes_when_it_meets_the_threshold():
    decision = evaluate_gate(rule(threshold=0.5), {"loss": 0.45}, None)
    assert decision["passed"] and decision["current_model_uri"] is None
    assert decision["reason"] == "loss 0.45 meets the threshold 0.5 (<=); no promoted model yet: nothing to beat"
    assert not evaluate_gate(rule(threshold=0.5), {"loss": 0.55}, None)["passed"]


@pytest.mark.parametrize(
    "gate, metrics, passed, words",
    [
        (rule(), {"loss": 0.39}, True, "loss 0.39 is better than the promoted model's 0.4"),
        (rule(), {"loss": 0.40}, False, "is not better than the promoted model's 0.4"),  # equal is not better
        (rule(), {"loss": 0.45}, False, "not better"),
        (rule(min_improvement=0.05), {"loss": 0.37}, False, "by more than 0.05"),
        (rule(min_improvement=0.05), {"loss": 0.30}, True, "better"),
        (rule(threshold=0.3), {"loss": 0.35}, False, "misses the threshold 0.3"),  # better, but not good enough
        (rule(objective="auc", direction="maximize", threshold=0.75), {"auc": 0.82}, True, "meets the threshold 0.75"),
        (rule(objective="auc", direction="maximize"), {"auc": 0.79}, False, "not better"),
        (rule(threshold=0.5, better_than_current=False), {"loss": 0.45}, True, "meets"),  # threshold only
        (rule(objective="f1", threshold=0.5), {"f1": 0.4}, True, "the promoted model has no recorded f1"),
    ],
)
def test_gate_against_the_promoted_model(gate, metrics, passed, words):
    decision = evaluate_gate(gate, metrics, CURRENT)
    assert decision["passed"] is passed and words in decision["reason"]
    assert decision["current_model_uri"] == CURRENT["model_uri"]


def test_gate_without_the_objective_says_how_to_report_it():
    with pytest.raises(GateError) as err:
        evaluate_gate(rule(), {"accuracy": 0.9}, CURRENT)
    assert str(err.value) == ("metric gate: the training reported no 'loss' (reported: accuracy); add a metric_"
                              "definitions entry that matches it in the log, or write it to TRAINING_METRICS_FILE")


def config(**overrides):
    base = dict(path="c.yaml", dag_id="retrain_c", job={"output_path": "s3://b/m"}, gate=GateRule("loss"),
                base_job_name="c")
    return RetrainingConfig(**{**base, **overrides})


def test_schedules():
    from airflow.sdk import AssetAll, AssetAny, AssetOrTimeSchedule, CronTriggerTimetable

    assert schedule_for(config()) is None
    cron = schedule_for(config(cron="@daily"))
    assert isinstance(cron, CronTriggerTimetable) and cron.expression == "0 0 * * *"
    assets = (AssetRef("s3://b/data/", "s3://b/data/"), AssetRef("features", "features"))
    any_of = schedule_for(config(assets=assets))
    assert isinstance(any_of, AssetAny) and [a.name for a in any_of.objects] == ["s3://b/data/", "features"]
    assert isinstance(schedule_for(config(assets=assets, asset_condition="all")), AssetAll)
    both = schedule_for(config(assets=assets[1:], cron="0 3 * * *"))
    assert isinstance(both, AssetOrTimeSchedule) and both.timetable.expression == "0 3 * * *"
    assert [a.name for a in both.asset_condition.objects] == ["features"]


def test_gate_task_rejects_quietly_or_fails_loudly():
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from operators.pipelines.retraining import MetricGateOperator, PromoteModelOperator

    candidate = {"succeeded": True, "metrics": {"loss": 0.5, "accuracy": 0.7}}
    decision = MetricGateOperator(task_id="metric_gate", rule=rule(), candidate=candidate, current=CURRENT).execute({})
    assert not decision["passed"] and decision["metrics"] == candidate["metrics"]
    job = {"job_name": "churn-2", "base_job_name": "churn", "source_dir": "s3://b/c/", "output_path": "s3://b/models",
           "entry_point": "train.py"}
    promote = PromoteModelOperator(task_id="promote_model", decision=decision, job=job, current=CURRENT,
                                   upload={"model_uri": "s3://b/models/churn-2/output/model.tar.gz"})
    with pytest.raises(AirflowSkipException) as skipped:
        promote.execute({})
    assert str(skipped.value) == ("not promoted: loss 0.5 is not better than the promoted model's 0.4; s3://b/models/"
                                  "churn/latest.json still names s3://b/models/churn-1/output/model.tar.gz")

    loud = MetricGateOperator(task_id="metric_gate", rule=rule(on_reject="fail"), candidate=candidate, current=CURRENT)
    with pytest.raises(AirflowFailException, match="metric gate rejected the model: loss 0.5 is not better"):
        loud.execute({})
    silent = MetricGateOperator(task_id="metric_gate", rule=rule(objective="auc"), candidate=candidate, current=None)
    with pytest.raises(AirflowFailException, match="reported no 'auc' \\(reported: accuracy, loss\\)"):
        silent.execute({})


class PushingTI:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def test_the_pointer_is_followed_only_to_the_dags_own_recorded_models(tmp_path):
    """A retraining lineage is its DAG's: current_model claims `<output_path>/<base_job_name>/`, so another owner's
    checkpoint_path cannot write a pointer there, and a pointer naming a model the platform did not record as this
    DAG's run of this lineage (another owner's, or a file anywhere) is refused in one line."""
    import json

    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowFailException

    from operators.pipelines.retraining import CurrentModelOperator
    from operators.state.owner_records import OwnerRecord, claim, record_job_area
    from operators.storage.hook import ObjectStorageHook

    models, storage = tmp_path / "models", ObjectStorageHook()
    with DAG("retrain_churn", schedule=None):
        current = CurrentModelOperator(task_id="current_model", output_path=str(models), base_job_name="churn")
    ti = PushingTI()
    assert current.execute({"run_id": "r1", "ti": ti}) is None and ti.pushed["resume_from"] == ""
    lineage = json.loads((models / "churn" / ".training-owner.json").read_text())
    assert (lineage["owner"], lineage["kind"]) == ("dag:retrain_churn", "lineage")
    with pytest.raises(Exception, match="checkpoint_path: .* lies in DAG 'retrain_churn''s retraining lineage"):
        claim(storage, "checkpoint_path", str(models / "churn"), OwnerRecord("bob", "training_job", "x", "checkpoints"))

    for job, owner in (("churn-1", "dag:retrain_churn"), ("churn-evil", "bob")):
        record_job_area(storage, str(models), job, OwnerRecord(owner, "retrain_churn", "churn", "job", job))
        (models / job / "output").mkdir(parents=True)
        (models / job / "output" / "model.tar.gz").write_bytes(b"m")
    pointer = {"model_uri": f"{models}/churn-1/output/model.tar.gz", "dag_id": "retrain_churn",
               "owner": "dag:retrain_churn", "metrics": {}}
    (models / "churn" / "latest.json").write_text(json.dumps(pointer))
    assert current.execute({"run_id": "r2", "ti": ti})["model_uri"] == pointer["model_uri"]
    assert ti.pushed["resume_from"] == pointer["model_uri"]
    for forged in ({"model_uri": f"{models}/churn-evil/output/model.tar.gz"}, {"owner": None}):
        (models / "churn" / "latest.json").write_text(json.dumps({**pointer, **forged}))
        with pytest.raises(AirflowFailException) as err:
            current.execute({"run_id": "r3", "ti": ti})
        assert "which the platform did not record as a run of DAG 'retrain_churn' in lineage 'churn'" in str(err.value)

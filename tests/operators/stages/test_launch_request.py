"""The LaunchRequest the launch stage builds from the spec: elastic training reaches the launcher (and survives the
deferred task's serialization), a static job has none; where the job root is the cluster's, `train` is asked to echo
its metrics stream and the stage takes the echoed points as metrics, records the series as it grows and shows none of
those lines."""

from __future__ import annotations

from training_runtime.contract import METRICS_ECHO_ENV

from operators.launch.base import LaunchRequest
from operators.launch.spec import validate_spec
from operators.stages import launch_training
from operators.stages.launch_training import LaunchTrainingOperator
from operators.tracking.metrics import LIVE_SERIES_SECONDS, METRIC_SERIES_KEY

ELASTIC = {"torch_distributed": {"elastic": {"min_hosts": 2, "max_restarts": 5}}}


def test_the_elastic_settings_reach_the_launcher_and_survive_serialization(local_job):
    job = local_job(instance_count=3, distribution=ELASTIC)
    request = LaunchTrainingOperator(task_id="launch_training", job=job).launch_request()
    assert request.elastic == {"min_hosts": 2, "max_hosts": 3, "max_restarts": 5}
    assert LaunchRequest.from_dict(request.to_dict()).elastic == request.elastic  # what a deferred task stores


def test_a_static_job_has_no_elastic_settings(local_job):
    for distribution in ("pytorch", {"torch_distributed": {"enabled": True}}, None):
        job = local_job(instance_count=2, distribution=distribution)
        assert LaunchTrainingOperator(task_id="launch_training", job=job).launch_request().elastic is None


def test_a_spec_cannot_ask_for_the_echo_where_the_worker_reads_the_file(local_job):
    job = local_job(environment={METRICS_ECHO_ENV: "1"})
    assert METRICS_ECHO_ENV not in LaunchTrainingOperator(task_id="launch_training", job=job).launch_request().env


def test_where_the_job_root_is_the_clusters_echoed_points_are_metrics_recorded_as_they_come(monkeypatch, capsys):
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE", "cluster")
    job = validate_spec({"job_name": "plane", "backend": "kubernetes", "source_dir": "s3://code/a.tar.gz",
                         "entry_point": "train.py", "output_path": "s3://out",
                         "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}).to_dict()
    op = LaunchTrainingOperator(task_id="launch_training", job=job)
    assert op.launch_request().env[METRICS_ECHO_ENV] == "1"
    pushed = []
    monkeypatch.setattr(op, "_push", lambda key, value: pushed.append((key, value)))
    clock = [1000.0]
    monkeypatch.setattr(launch_training.time, "monotonic", lambda: clock[0])
    metrics = op._metrics()
    on_line = op._log_and_match(metrics)
    on_line("[plane-0] epoch 1 loss=0.5")
    on_line('[plane-0] [training-metric] {"name": "accuracy", "value": 0.75, "step": 1}')
    clock[0] += 1
    on_line("[plane-0] epoch 2 loss=0.25")  # within LIVE_SERIES_SECONDS of the last record: not recorded yet
    clock[0] += LIVE_SERIES_SECONDS
    on_line('[plane-1] [training-metric] {"name": "system/plane-1/cpu_percent", "value": 50}')
    assert [key for key, _ in pushed] == [METRIC_SERIES_KEY, METRIC_SERIES_KEY]
    assert pushed[0][1]["final"] == {"loss": 0.5}
    assert pushed[-1][1]["final"] == {"loss": 0.25, "accuracy": 0.75}
    assert pushed[-1][1]["series"]["system/plane-1/cpu_percent"][0]["value"] == 50
    shown = capsys.readouterr().out  # the task log
    assert "[plane-0] epoch 2 loss=0.25" in shown and "training-metric" not in shown

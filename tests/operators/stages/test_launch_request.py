"""The LaunchRequest the launch stage builds from the spec: elastic training reaches the launcher (and survives the
deferred task's serialization), a static job has none."""

from __future__ import annotations

from operators.launch.base import LaunchRequest
from operators.stages.launch_training import LaunchTrainingOperator

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

"""Kueue queues and priorities: a spec picks only among the admin's ([training.kubernetes] queue, queues,
queue_priority, queue_priorities), and a queued Job is created suspended with Kueue's labels."""

from __future__ import annotations

import pytest
from kubernetes_job_samples import make_request

from operators.launch.kubernetes.manifests import job_manifest
from operators.launch.kubernetes.options import resolve_options
from operators.launch.kubernetes.profiles import ProfileError
from operators.launch.kubernetes.queues import queue_choice
from operators.launch.kubernetes.settings import KubernetesSettings

SETTINGS = KubernetesSettings(namespace="training", queue="team-a", queues=("team-b",), queue_priority="low",
                              queue_priorities=("high",))


def test_without_a_queue_the_job_is_not_kueues():
    options = resolve_options({}, KubernetesSettings())
    manifest = job_manifest(make_request(), options, "img")
    assert "suspend" not in manifest["spec"]
    assert not [k for k in manifest["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")]


def test_the_admins_default_queue_makes_a_suspended_job_with_kueues_labels():
    options = resolve_options({}, SETTINGS)
    manifest = job_manifest(make_request(), options, "img")
    assert manifest["spec"]["suspend"] is True
    labels = manifest["metadata"]["labels"]
    assert (labels["kueue.x-k8s.io/queue-name"], labels["kueue.x-k8s.io/priority-class"]) == ("team-a", "low")


def test_a_spec_picks_another_listed_queue_and_priority():
    options = resolve_options({"queue": "team-b", "queue_priority": "high"}, SETTINGS)
    assert (options.queue, options.queue_priority) == ("team-b", "high")


@pytest.mark.parametrize("options, message", [
    ({"queue": "team-z"}, r"'queue' is 'team-z', not one of the admin's queues \(use one of: team-a, team-b"),
    ({"queue": ""}, r"'queue' is '', not one of the admin's queues"),
    ({"queue_priority": "urgent"}, r"'queue_priority' is 'urgent', not one of the admin's queue_priorities"),
])
def test_a_queue_or_priority_the_admin_did_not_list_is_refused_in_the_first_task(options, message):
    with pytest.raises(ProfileError, match=message):
        queue_choice(options, SETTINGS)
    with pytest.raises(ValueError, match=message):
        resolve_options(options, SETTINGS)


def test_no_queue_may_be_picked_when_the_admin_lists_none():
    with pytest.raises(ProfileError, match=r"'queue' is 'team-a', not one of the admin's queues \(this Airflow lists"):
        queue_choice({"queue": "team-a"}, KubernetesSettings())



def test_a_queued_job_keeps_the_pod_failure_policy_of_its_hosts():
    # Kueue's suspension (preemption) is not a pod failure: nothing in the policy is relaxed for queued Jobs.
    queued = job_manifest(make_request(hosts=2), resolve_options({}, SETTINGS), "img")
    plain = job_manifest(make_request(hosts=2), resolve_options({}, KubernetesSettings()), "img")
    assert queued["spec"]["podFailurePolicy"] == plain["spec"]["podFailurePolicy"]
    assert queued["spec"]["backoffLimit"] == plain["spec"]["backoffLimit"] == 0


def test_the_first_task_refuses_an_unlisted_queue_with_one_line_naming_the_field():
    from operators.launch.spec import validate_spec
    from operators.launch.kubernetes.checks import check_options
    from operators.jobspec.errors import SpecError

    raw = {"job_name": "j", "source_dir": "s3://b/code/", "output_path": "s3://b/models", "entry_point": "train.py",
           "backend": "kubernetes", "kubernetes": {"queue": "team-z"}}
    with pytest.raises(SpecError) as err:
        check_options(validate_spec(raw), SETTINGS)
    text = str(err.value)
    assert text.startswith("kubernetes.queue: is 'team-z', not one of the admin's queues (use one of: team-a, team-b")
    assert "\n" not in text

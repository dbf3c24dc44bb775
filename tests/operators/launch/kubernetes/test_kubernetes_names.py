"""Kubernetes names of a training job: valid DNS names and labels, deterministic (a retry finds the same Job), and
distinct for job names that differ only in characters Kubernetes refuses."""

from __future__ import annotations

import pytest
from kubernetes_job_samples import all_labels, build, make_request, validate

from operators.launch.kubernetes.names import is_dns1123_label, is_dns1123_subdomain, is_label_key, is_label_value
from operators.launch.names import MAX_NAME_LENGTH, is_dns1035_label, resource_name


@pytest.mark.parametrize(
    "job_name",
    [
        "my-job",
        "My_Job",
        "2024-retrain",
        "nightly.retrain/cos://bucket/prefix with spaces",
        "a" * 200,
        "resnet50-imagenet-" + "x" * 34,  # exactly MAX_NAME_LENGTH
        "resnet50-imagenet-" + "x" * 35,  # one over
    ],
)
def test_names_are_valid_deterministic_and_distinct(job_name):
    name = resource_name(job_name)
    assert name == resource_name(job_name)  # a retry finds the same Job
    assert is_dns1035_label(name) and len(name) <= MAX_NAME_LENGTH
    assert is_dns1123_label(f"{name}-9999999999")  # pod hostname <name>-<index> stays a DNS label
    job, _ = build(make_request(job_name=job_name, hosts=4))
    validate(job)
    assert job["metadata"]["annotations"]["airflow-training-jobs/job-name"] == job_name
    for key, value in all_labels(job):
        assert is_label_key(key) and is_label_value(value)


def test_names_keep_valid_job_names_and_never_collide():
    assert resource_name("my-job") == "my-job"
    assert resource_name("My_Job") != resource_name("my-job")
    assert resource_name("My_Job") != resource_name("my_job")
    assert resource_name("a" * 200) != resource_name("a" * 201)
    assert resource_name("2024-retrain")[0].isalpha()  # a Service name must start with a letter
    assert is_dns1123_subdomain("airflow-training-jobs")

"""Kubernetes names and labels of a training job, and the syntax Kubernetes accepts for names, label keys and values,
quantities and environment variable names: pure functions, no I/O, no client.

The Job and Service of a job are named by ``resource_name(job_name)``, derived deterministically from ``job_name`` (the
idempotency key): a retried task or a restarted worker computes the same name and reattaches to the Job already there
instead of starting a second one. Host i of an Indexed Job is ``<name>-<i>.<name>`` (``host_names``): Kubernetes names
the pods ``<job>-<index>`` and the headless Service ``<name>`` is their subdomain.

The syntax checks are shared by the per-job options (operators/launch/kubernetes/options.py) and the manifests
(operators/launch/kubernetes/manifests.py).
"""

from __future__ import annotations

import re
from typing import Mapping

from operators.launch.names import JOB_LABEL, LABEL_PREFIX

SPEC_HASH_ANNOTATION = f"{LABEL_PREFIX}/spec-hash"
MANAGED_BY = "airflow-training-jobs"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"  # the Job's uid, on each of its pods

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1123_LABEL.match(value))


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(_DNS1123_SUBDOMAIN.match(value))


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_LABEL_NAME.match(value)))


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns1123_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def is_env_var_name(name: str) -> bool:
    return bool(_ENV_NAME.match(name))


def host_names(name: str, instance_count: int) -> list[str]:
    """`<name>-<i>.<name>`: the pod hostname Kubernetes gives index i, under the headless Service."""
    if instance_count < 1:
        raise ValueError(f"instance_count is {instance_count}; give at least 1 host")
    return [f"{name}-{index}.{name}" for index in range(instance_count)]


def secret_name(name: str) -> str:
    """The Secret holding the job's secrets by reference (operators/launch/kubernetes/secrets.py): `<name>-env`
    (`name` is a DNS-1123 label of at most 63 characters; a Secret's name may have 253)."""
    return f"{name}-env"


def selector_labels(name: str) -> dict[str, str]:
    return {JOB_LABEL: name}


def job_labels(name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    labels = dict(extra or {})
    labels.update(
        {
            "app.kubernetes.io/name": "training-job",
            "app.kubernetes.io/instance": name,
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/component": "training",
        }
    )
    labels.update(selector_labels(name))
    return labels


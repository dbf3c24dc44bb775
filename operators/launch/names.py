"""Backend-neutral names of a training job's resources (Kubernetes Jobs, Docker containers and networks) and the
labels that find them again: pure functions, no I/O.

Resources are named by ``resource_name(job_name)``, derived deterministically from ``job_name`` (the idempotency
key): a retried task or a restarted worker computes the same name and reattaches instead of starting a second run.
The name is a DNS-1035 label, valid for Kubernetes objects, pod host names and Docker container names alike.
"""

from __future__ import annotations

import hashlib
import re

LABEL_PREFIX = "airflow-training-jobs"
JOB_LABEL = f"{LABEL_PREFIX}/job"  # value: the resource name; selects a job's pods/containers and Service/network
ORIGINAL_NAME_ANNOTATION = f"{LABEL_PREFIX}/job-name"  # the job_name as the user wrote it

# A pod's hostname is "<job>-<index>" and must stay a DNS label (<= 63): keep room for 10 index digits.
MAX_NAME_LENGTH = 52
_HASH_LENGTH = 8
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def is_dns1035_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1035_LABEL.match(value))


def resource_name(job_name: str) -> str:
    """The name of a job's resources: a DNS-1035 label of at most MAX_NAME_LENGTH, the same on every call.

    A job_name that already is such a name is used as is (so `kubectl get job <job_name>` works). Anything
    else is lowercased, every run of other characters becomes '-', and a hash of the original job_name is
    appended, so two job names that differ only in characters Kubernetes refuses ('My_Job' and 'my-job')
    never share a Job.
    """
    if not job_name:
        raise ValueError("job_name is empty; give the job a name (it is the idempotency key)")
    if is_dns1035_label(job_name) and len(job_name) <= MAX_NAME_LENGTH:
        return job_name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:_HASH_LENGTH]
    base = re.sub(r"[^a-z0-9]+", "-", job_name.lower()).strip("-")
    if not base or not base[0].isalpha():
        base = "job-" + base
    base = base[: MAX_NAME_LENGTH - _HASH_LENGTH - 1].rstrip("-")
    return f"{base}-{digest}"

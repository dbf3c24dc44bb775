"""Calls on the Kubernetes API shared by the launcher (sync client) and the trigger (asyncio client): reading a
training Job (and waiting until one being deleted is gone), deleting it with its pods and Service, making its Service,
reading a Job's final state, and turning API errors into one line.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from kubernetes.client import V1DeleteOptions
from kubernetes.client.rest import ApiException
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from operators.launch.kubernetes.manifests import service_manifest
from operators.launch.kubernetes.names import secret_name
from operators.launch.names import JOB_LABEL


DELETE_WAIT_SECONDS = 180


class KubernetesLaunchError(RuntimeError):
    """Kubernetes refused or failed an operation of the launcher (one line: what, where, what to do)."""


def api_error(action: str, namespace: str, err: Any) -> KubernetesLaunchError:
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", "") or ""
    body = getattr(err, "body", "") or ""
    message = reason
    try:
        message = json.loads(body).get("message") or reason
    except Exception:
        pass
    hint = {
        401: "check the credentials of the Kubernetes connection",
        403: (
            "give the identity Airflow uses the rights of the Role in docs/kubernetes.md (jobs, pods, pods/log, "
            "services, secrets, events) "
            f"in namespace {namespace}"
        ),
        404: f"check that namespace {namespace} exists",
        422: "the manifest was refused; check the job's options and resources",
    }.get(status, "check the cluster and the Kubernetes connection")
    return KubernetesLaunchError(f"Kubernetes could not {action} in namespace {namespace} ({status} {message}); {hint}")


def read_job(kube: Any, name: str, namespace: str) -> Any | None:
    """The Job (through the provider's KubernetesHook `kube`, with its retry policy), or None if there is none."""
    try:
        return kube.get_job_status(job_name=name, namespace=namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise api_error(f"read Job {name}", namespace, err) from None


def wait_deleted(kube: Any, name: str, namespace: str) -> None:
    """Until the Job being deleted is gone (its pods' finalizers may hold it a while)."""
    deadline = time.monotonic() + DELETE_WAIT_SECONDS
    while read_job(kube, name, namespace) is not None:
        if time.monotonic() > deadline:
            raise KubernetesLaunchError(
                f"Job {namespace}/{name} is still being deleted after {DELETE_WAIT_SECONDS} s; "
                "check its pods' finalizers, then retry"
            )
        time.sleep(1)


def finished_state(job: Any) -> str | None:
    """"Complete", "Failed" or None (still running) from a Job's conditions."""
    for condition in (job.status and job.status.conditions) or []:
        if condition.status == "True" and condition.type in ("Complete", "SuccessCriteriaMet"):
            return "Complete"
        if condition.status == "True" and condition.type in ("Failed", "FailureTarget"):
            return "Failed"
    return None


def ensure_service(core: Any, name: str, namespace: str, labels: Mapping[str, str], job_uid: str) -> None:
    """The training Job's headless Service, owned by the Job `job_uid` (sync client): created, or kept if it is that
    Job's already; one an earlier Job of this name left is replaced."""
    body = service_manifest(name, namespace, labels, owner_uid=job_uid)
    for _ in range(3):
        try:
            core.create_namespaced_service(namespace=namespace, body=body)
            return
        except ApiException as err:
            if err.status != 409:
                raise api_error(f"create Service {name}", namespace, err) from None
        try:
            existing = core.read_namespaced_service(name=name, namespace=namespace)
        except ApiException as err:
            if err.status == 404:
                continue
            raise api_error(f"read Service {name}", namespace, err) from None
        owners = {ref.uid for ref in existing.metadata.owner_references or []}
        if job_uid in owners:
            return
        # Left by an earlier Job of this name: its owner reference would let the garbage collector
        # delete it under the running job.
        try:
            core.delete_namespaced_service(name=name, namespace=namespace)
        except ApiException as err:
            if err.status != 404:
                raise api_error(f"replace Service {name}", namespace, err) from None
    raise KubernetesLaunchError(f"could not create Service {namespace}/{name}; check who else manages it")


def delete_job(core: Any, batch: Any, name: str, namespace: str, propagation_policy: str) -> None:
    """Delete the Job, its pods, its Service and its Secret (sync clients); what is gone already is fine."""
    steps = (
        ("delete Job", lambda: batch.delete_namespaced_job(
            name=name, namespace=namespace, body=V1DeleteOptions(propagation_policy=propagation_policy)
        )),
        # Pods the garbage collector would get to later (Background) or that lost their owner.
        ("delete pods of Job", lambda: core.delete_collection_namespaced_pod(
            namespace=namespace, label_selector=f"{JOB_LABEL}={name}"
        )),
        ("delete Service", lambda: core.delete_namespaced_service(name=name, namespace=namespace)),
        # Owned by the Job, so the garbage collector would delete it too: not waiting for that keeps it short-lived.
        ("delete Secret", lambda: core.delete_namespaced_secret(name=secret_name(name), namespace=namespace)),
    )
    errors = []
    for action, call in steps:
        try:
            call()
        except ApiException as err:
            if err.status != 404:
                errors.append(api_error(f"{action} {name}", namespace, err))
    if errors:
        raise errors[0]


async def delete_job_async(hook: Any, name: str, namespace: str, propagation_policy: str = "Foreground") -> None:
    """Delete the Job, its pods, its Service and its Secret; what is gone already is fine."""
    async with hook.get_conn() as api:
        calls = (
            lambda: async_client.BatchV1Api(api).delete_namespaced_job(
                name=name, namespace=namespace, body=async_client.V1DeleteOptions(propagation_policy=propagation_policy)
            ),
            lambda: async_client.CoreV1Api(api).delete_collection_namespaced_pod(
                namespace=namespace, label_selector=f"{JOB_LABEL}={name}"
            ),
            lambda: async_client.CoreV1Api(api).delete_namespaced_service(name=name, namespace=namespace),
            lambda: async_client.CoreV1Api(api).delete_namespaced_secret(name=secret_name(name), namespace=namespace),
        )
        for call in calls:
            try:
                await call()
            except AsyncApiException as err:
                if err.status != 404:
                    raise


"""Secrets by reference on the kubernetes backend: the values the launch stage resolved from Airflow (Variables,
connection fields; operators/jobspec/secret_refs.py) go into one Kubernetes Secret per training job, owned by its Job,
and the pods read them through ``valueFrom.secretKeyRef``. The values are never in the Job or Pod spec, the job root,
XCom or the trigger's arguments (LaunchRequest.secret_env is not serialized).

Order, and why: the Secret is created first (no owner), then the Job, then the Secret is patched to be owned by the
Job (ownerReferences -> the Job's uid, which only exists once the Job does). The other order (Job first, then the
Secret with its owner in the create body) lets the kubelet try to start a pod before the Secret exists; the pod then
reports CreateContainerConfigError, which the watch rightly treats as a missing Secret and fails fast on. Not a Job
created suspended and resumed once its Secret exists: `patch` on Jobs is optional (log cursors only) and would
become necessary to launch, and a worker dying before the resume would leave a suspended Job that a retry reattaches
to; dying here leaves only an unowned Secret, which the next try replaces.

Once owned, the control plane's garbage collector deletes the Secret with the Job (TTL, stop(), `kubectl delete
job`); stop() and the trigger's fail-fast clean-up also delete it by name. One name per job (``<name>-env``): a retry
or a restarted worker that reattaches to the running Job adopts the Secret there (or recreates it if someone deleted
it) and never makes a second one. A Secret left without an owner (the worker died between the two calls) is replaced
when the next try creates its Job.
"""

from __future__ import annotations

import base64
import time
from dataclasses import replace
from typing import Any, Mapping

from kubernetes.client.rest import ApiException
from kubernetes_asyncio.client import CoreV1Api as AsyncCoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from operators.launch.kubernetes.api import KubernetesLaunchError, api_error
from operators.launch.kubernetes.names import job_labels, secret_name
from operators.launch.kubernetes.options import KubernetesJobOptions
from operators.launch.names import JOB_LABEL

CREATE_ATTEMPTS = 5


def with_secret_env(options: KubernetesJobOptions, name: str, secret_env: Mapping[str, str]) -> KubernetesJobOptions:
    """The options with one secretKeyRef per resolved reference (key = the variable's name) added."""
    if not secret_env:
        return options
    clash = sorted(set(secret_env) & set(options.secret_env))
    if clash:
        raise ValueError(f"environment.{clash[0]} is also in kubernetes.secret_env; keep one of them")
    refs = {var: (secret_name(name), var) for var in secret_env}
    return replace(options, secret_env={**options.secret_env, **refs})


def owner_reference(name: str, job_uid: str) -> dict[str, Any]:
    # blockOwnerDeletion false: true needs `update` on jobs/finalizers, and nothing needs the Job to wait for it.
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid,
            "controller": False, "blockOwnerDeletion": False}


def secret_manifest(name: str, namespace: str, values: Mapping[str, str], labels: Mapping[str, str] | None = None,
                    job_uid: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": secret_name(name), "namespace": namespace, "labels": job_labels(name, labels)}
    if job_uid:
        metadata["ownerReferences"] = [owner_reference(name, job_uid)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,  # nothing edits it: kubelets need not watch it
        "metadata": metadata,
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in sorted(values.items())},
    }


async def read_values_async(hook: Any, name: str, namespace: str) -> dict[str, str]:
    """The values in the Job's Secret, through the provider's AsyncKubernetesHook (the trigger masks them in the pod
    logs it streams: the triggerer never saw the worker's masker). {} when it is gone."""
    async with hook.get_conn() as api:
        try:
            secret = await AsyncCoreV1Api(api).read_namespaced_secret(name=secret_name(name), namespace=namespace)
        except AsyncApiException as err:
            if err.status == 404:
                return {}
            raise api_error(f"read Secret {secret_name(name)}", namespace, err) from None
    return {key: base64.b64decode(value).decode(errors="replace") for key, value in (secret.data or {}).items()}


class JobSecret:
    """The Secret of one training job, through the sync CoreV1Api `core`."""

    def __init__(self, core: Any, name: str, namespace: str, labels: Mapping[str, str] | None = None) -> None:
        self.core, self.name, self.namespace, self.labels = core, name, namespace, dict(labels or {})
        self.secret = secret_name(name)

    def put(self, values: Mapping[str, str]) -> None:
        """Before the Job is created: the Secret with these values and no owner yet (a leftover is replaced)."""
        body = secret_manifest(self.name, self.namespace, values, self.labels)
        for _ in range(CREATE_ATTEMPTS):
            try:
                self.core.create_namespaced_secret(namespace=self.namespace, body=body)
                return
            except ApiException as err:
                if err.status != 409:
                    raise api_error(f"create Secret {self.secret}", self.namespace, err) from None
            # Left by an earlier Job of this name (its garbage collection may still be on the way) or by a try that
            # died before adopting it: replace it, never reuse it (the collector could delete it under the new Job).
            self._check_ours(self._read())
            self.delete()
            time.sleep(0.2)
        raise KubernetesLaunchError(f"could not create Secret {self.namespace}/{self.secret}; check who else "
                                    "manages it")

    def adopt(self, job_uid: str, values: Mapping[str, str]) -> None:
        """Make the Job `job_uid` the Secret's owner; recreate it (owned) if it is gone. Never a second Secret."""
        existing = self._read()
        if existing is None:
            body = secret_manifest(self.name, self.namespace, values, self.labels, job_uid)
            try:
                self.core.create_namespaced_secret(namespace=self.namespace, body=body)
            except ApiException as err:
                if err.status != 409:  # 409: another try made it in between
                    raise api_error(f"create Secret {self.secret}", self.namespace, err) from None
                self.adopt(job_uid, values)
            return
        self._check_ours(existing)
        if job_uid in {ref.uid for ref in existing.metadata.owner_references or []}:
            return
        patch = {"metadata": {"ownerReferences": [owner_reference(self.name, job_uid)]}}
        try:
            self.core.patch_namespaced_secret(name=self.secret, namespace=self.namespace, body=patch)
        except ApiException as err:
            raise api_error(f"set the owner of Secret {self.secret}", self.namespace, err) from None

    def delete(self) -> None:
        """Delete it; what is gone already is fine."""
        try:
            self.core.delete_namespaced_secret(name=self.secret, namespace=self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise api_error(f"delete Secret {self.secret}", self.namespace, err) from None

    def _read(self) -> Any | None:
        try:
            return self.core.read_namespaced_secret(name=self.secret, namespace=self.namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise api_error(f"read Secret {self.secret}", self.namespace, err) from None

    def _check_ours(self, existing: Any | None) -> None:
        if existing is not None and (existing.metadata.labels or {}).get(JOB_LABEL) != self.name:
            raise KubernetesLaunchError(
                f"a Secret named {self.secret} exists in namespace {self.namespace} but was not created for this "
                "training job; delete or rename it, or give the job another job_name")

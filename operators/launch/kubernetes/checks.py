"""What validate_spec checks of a kubernetes job, cheaply, before anything is staged (operators/launch/checks.py runs
it): its options set nothing its admin-defined profile does not and pick only the admin's queues and priorities
(profiles.py, queues.py); the cluster is configured and answers."""

from __future__ import annotations

import os
from typing import Any

from kubernetes.client import VersionApi
from kubernetes.client.rest import ApiException

from operators.jobspec.checks import (
    PING_TIMEOUT_SECONDS,
    check_connections,
    short_error,
    spec_uris,
)
from operators.jobspec.errors import SpecError
from operators.jobspec.model import JobSpec
from operators.launch.kubernetes.options import resolve_options
from operators.launch.kubernetes.profiles import ProfileError, check_no_platform_secret, check_spec_options
from operators.launch.kubernetes.queues import queue_choice
from operators.launch.kubernetes.settings import kubernetes_settings as read_settings
from operators.storage.location import DEFAULT_CONNECTIONS, connection_env_name


def check_options(spec: JobSpec, kubernetes_settings: Any = None) -> None:
    """The spec's kubernetes options against the admin's profile and queues ([training.kubernetes])."""
    if kubernetes_settings is None:
        kubernetes_settings = read_settings()
    try:
        check_spec_options(spec.backend_options(), kubernetes_settings)
        check_no_platform_secret(spec.backend_options(), kubernetes_settings)
        queue_choice(spec.backend_options(), kubernetes_settings)  # a queue or priority the admin did not list
    except ProfileError as err:
        raise SpecError(f"kubernetes.{err.key}", err.problem) from None


def check_storage(spec: JobSpec, kubernetes_settings: Any = None) -> None:
    """Shared volume: the worker moves the bytes with its Airflow connections. The cluster's data plane: the steps
    in the cluster do, with the connections of the profile's storage_secret, so every location is object storage
    (the worker's files are not in the cluster) and the Secret holds each scheme's connection."""

    if kubernetes_settings is None:
        kubernetes_settings = read_settings()
    options = resolve_options(spec.backend_options(), kubernetes_settings)
    if not options.in_cluster:
        check_connections(spec)
        return
    schemes = {}
    for field, uri in spec_uris(spec):
        if "://" not in uri or uri.startswith("file://"):
            raise SpecError(field, f"{uri} is a local path, but this job's bytes move in the cluster (kubernetes "
                            "data_plane = cluster), which cannot read this worker's files; upload it to object "
                            "storage and give its s3://, cos://, oss:// or obs:// URI (or, where the Airflow workers "
                            "mount the cluster's volume, an admin sets data_plane = shared_volume)")
        schemes.setdefault(uri.split("://", 1)[0], field)
    keys = _secret_keys(options) if options.storage_secret else set()
    for scheme, field in schemes.items():
        conn_id = spec.connections.get(scheme, DEFAULT_CONNECTIONS[scheme])
        key = connection_env_name(conn_id)  # what a key of the storage Secret is named
        if key in keys or (not options.storage_secret and scheme == "s3"):
            continue  # plain s3:// without a Secret: the pods' own identity (IRSA, Workload Identity)
        where = f"Secret {options.storage_secret}" if options.storage_secret else "no storage_secret"
        raise SpecError(field, f"uses {scheme}:// through connection '{conn_id}', but the cluster's data plane has "
                        f"{where} with key {key} in namespace {options.namespace}; ask the admin to add it "
                        "(docs/kubernetes.md) or name another connection in connections." + scheme)


def _secret_keys(options: Any) -> set[str]:
    # lazy: Airflow, which jobspec/ and launch/ never import at module level (the SDK's local mode)
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    try:
        secret = KubernetesHook(conn_id=read_settings().conn_id or None).core_v1_client.read_namespaced_secret(
            options.storage_secret, options.namespace, _request_timeout=PING_TIMEOUT_SECONDS)
    except ApiException as err:
        if err.status == 404:
            raise SpecError("backend", f"is kubernetes with its data plane in the cluster, but the storage Secret "
                            f"{options.storage_secret} does not exist in namespace {options.namespace}; create it "
                            "(docs/kubernetes.md) or fix [training.kubernetes] storage_secret") from None
        raise SpecError("backend", f"cannot read the storage Secret {options.storage_secret} in namespace "
                        f"{options.namespace} ({err.status} {err.reason}); give Airflow's identity `get` on "
                        "secrets there") from None
    except Exception as err:
        raise SpecError("backend", f"cannot reach the cluster to read the storage Secret ({short_error(err)}); "
                        "check the Kubernetes connection") from None
    return set((secret.data or {}).keys())


def check_reachable() -> None:
    """A cluster is configured (the connection, a kubeconfig or in-cluster) and answers with these credentials."""
    # lazy: Airflow, which jobspec/ and launch/ never import at module level (the SDK's local mode)
    from airflow.providers.common.compat.sdk import BaseHook

    conn_id = read_settings().conn_id
    has_conn = False
    if conn_id:
        try:
            BaseHook.get_connection(conn_id)
            has_conn = True
        except Exception:
            pass
    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not (has_conn or in_cluster or os.path.isfile(kubeconfig.split(os.pathsep)[0])):
        raise SpecError("backend", f"is kubernetes but no cluster is configured: no Airflow connection '{conn_id}', "
                        "no kubeconfig and not in a cluster; create the connection ([training.kubernetes] conn_id) "
                        "or use backend local or docker")
    # lazy: Airflow, which jobspec/ and launch/ never import at module level (the SDK's local mode)
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    try:
        VersionApi(KubernetesHook(conn_id=conn_id or None).get_conn()).get_code(_request_timeout=PING_TIMEOUT_SECONDS)
    except ApiException as err:  # it answered: reachable, unless it refused who we are
        if err.status == 401:
            raise SpecError("backend", f"is kubernetes but the cluster refuses the credentials of connection "
                            f"'{conn_id}' (401); fix the connection's kubeconfig") from None
    except Exception as err:
        raise SpecError("backend", f"is kubernetes but the cluster of connection '{conn_id}' does not answer "
                        f"({short_error(err)}); check the connection or the cluster") from None

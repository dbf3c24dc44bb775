"""What validate_spec checks of a kubernetes job, cheaply, before anything is staged (operators/launch/checks.py runs
it): its options set nothing its admin-defined profile does not and pick only the admin's queues and priorities
(profiles.py, queues.py); the cluster is configured and answers."""

from __future__ import annotations

import os
from typing import Any

from operators.jobspec.checks import PING_TIMEOUT_SECONDS, short_error
from operators.jobspec.errors import SpecError
from operators.jobspec.model import JobSpec


def check_options(spec: JobSpec, kubernetes_settings: Any = None) -> None:
    """The spec's kubernetes options against the admin's profile and queues ([training.kubernetes])."""
    from operators.launch.kubernetes.profiles import ProfileError, check_spec_options
    from operators.launch.kubernetes.queues import queue_choice

    if kubernetes_settings is None:
        from operators.settings import kubernetes_settings as read_settings

        kubernetes_settings = read_settings()
    try:
        check_spec_options(spec.backend_options(), kubernetes_settings)
        queue_choice(spec.backend_options(), kubernetes_settings)  # a queue or priority the admin did not list
    except ProfileError as err:
        raise SpecError(f"kubernetes.{err.key}", err.problem) from None


def check_reachable() -> None:
    """A cluster is configured (the connection, a kubeconfig or in-cluster) and answers with these credentials."""
    from airflow.providers.common.compat.sdk import BaseHook

    from operators.settings import kubernetes_settings

    conn_id = kubernetes_settings().conn_id
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
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes.client import VersionApi
    from kubernetes.client.rest import ApiException

    try:
        VersionApi(KubernetesHook(conn_id=conn_id or None).get_conn()).get_code(_request_timeout=PING_TIMEOUT_SECONDS)
    except ApiException as err:  # it answered: reachable, unless it refused who we are
        if err.status == 401:
            raise SpecError("backend", f"is kubernetes but the cluster refuses the credentials of connection "
                            f"'{conn_id}' (401); fix the connection's kubeconfig") from None
    except Exception as err:
        raise SpecError("backend", f"is kubernetes but the cluster of connection '{conn_id}' does not answer "
                        f"({short_error(err)}); check the connection or the cluster") from None

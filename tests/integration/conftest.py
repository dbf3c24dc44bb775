"""Fixtures shared by the integration tests of several modules (defined once here, so a session-scoped one, like
the local Kubernetes control plane, is started once per session)."""

from kube_cluster import kube_admin, kube_cluster, kube_namespace  # noqa: F401
from real_node import real_admin, real_cluster, real_namespace  # noqa: F401
from airflow_server import airflow_server  # noqa: F401
from postgres_server import postgres_server  # noqa: F401

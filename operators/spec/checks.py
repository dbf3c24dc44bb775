"""What the first task checks about the world, cheaply, before anything is staged: the backend is configured and
answers, every URI scheme has its connection, local paths exist / are writable and lie under the configured roots.
A problem raises SpecError naming the spec field (one line, what to do); the validate stage fails the run at once.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from operators.spec.model import SCHEMES, JobSpec
from operators.spec.errors import SpecError
from operators.storage.location import DEFAULT_CONNECTIONS
PING_TIMEOUT_SECONDS = 5


def spec_uris(spec: JobSpec) -> Iterator[tuple[str, str]]:
    """(field, URI) of every location the job reads or writes."""
    yield "source_dir", spec.source_dir
    yield "output_path", spec.output_path
    if spec.checkpoint_path:
        yield "checkpoint_path", spec.checkpoint_path
    if spec.resume_from and spec.resume_from != "latest":
        yield "resume_from", spec.resume_from
    for channel, uri in spec.inputs.items():
        yield f"inputs.{channel}", uri


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0] if "://" in uri else "file"


def _local_path(uri: str) -> str:
    return os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)


def check_connections(spec: JobSpec) -> None:
    from airflow.providers.common.compat.sdk import BaseHook

    wanted: dict[str, str] = {}
    for field, uri in spec_uris(spec):
        scheme = _scheme(uri)
        if scheme in SCHEMES:
            wanted.setdefault(scheme, field)
    for scheme in spec.connections:
        wanted.setdefault(scheme, f"connections.{scheme}")
    for scheme, field in wanted.items():
        conn_id = spec.connections.get(scheme, DEFAULT_CONNECTIONS[scheme])
        if scheme == "s3" and conn_id == DEFAULT_CONNECTIONS["s3"]:
            continue  # plain s3:// may use boto3's own credential chain (instance role, environment)
        try:
            conn = BaseHook.get_connection(conn_id)
        except Exception as err:  # AirflowNotFoundException, or a secrets backend error
            if "isn't defined" not in str(err) and type(err).__name__ != "AirflowNotFoundException":
                raise SpecError(field, f"cannot read Airflow connection '{conn_id}' ({type(err).__name__}); check "
                                "the secrets backend") from None
            raise SpecError(field, f"uses {scheme}:// but Airflow connection '{conn_id}' does not exist; create it "
                            f"(type aws, extra endpoint_url) or name another in connections.{scheme}") from None
        if conn.conn_type not in ("aws", "s3"):
            raise SpecError(field, f"connection '{conn_id}' for {scheme}:// is of type {conn.conn_type!r}; "
                            "object storage needs a connection of type aws")


def check_local_paths(spec: JobSpec, roots: tuple[str, ...], areas: dict | None = None) -> None:
    from operators.spec.local_paths import in_closed_area, in_platform_area

    for field, uri in spec_uris(spec):
        if _scheme(uri) != "file":
            continue
        path = _local_path(uri)
        if in_platform_area(field, path, areas):
            continue  # the SDK's uploaded code or its default models directory, in the workspace
        if field == "source_dir" and in_closed_area(path, areas):
            raise SpecError(field, f"{path} is code another user uploaded (or was staged without a triggering user); "
                            "upload your own with the SDK, or name object storage or a path under local_roots")
        if roots and not any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots):
            raise SpecError(field, f"{path} is outside the local roots this Airflow allows ({', '.join(roots)}); "
                            "use a path under one of them or object storage ([training] local_roots)")
        if field in ("output_path", "checkpoint_path"):
            existing = path
            while not os.path.exists(existing):
                existing = os.path.dirname(existing)
            if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
                raise SpecError(field, f"{path} is not writable by the Airflow worker ({existing} is not a writable "
                                "directory); give a writable path")
        elif not os.path.exists(path):
            raise SpecError(field, f"{path} does not exist on the Airflow worker; check the path")


def check_isolation_options(spec: JobSpec, kubernetes_settings: Any = None) -> None:
    """The spec's kubernetes options set nothing its admin-defined profile does not (operators/launch/kubernetes/profiles.py)
    and pick only the admin's queues and priorities (operators/launch/kubernetes/queues.py).
    Docker's `user` and `host_workspace` are checked by the spec model itself (operators/spec/parts.py)."""
    if spec.backend != "kubernetes":
        return
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


def check_local_resources(spec: JobSpec, settings: Any = None) -> None:
    """A local job asks for no more memory, CPU or GPUs per host than the admin allows and this worker has
    (operators/launch/local/limits.py, operators/launch/worker_slots.py); the launch checks again where it runs."""
    if spec.backend != "local":
        return
    from operators.launch.local.limits import LimitError, check_resources
    from operators.launch.worker_slots import gpu_devices

    if settings is None:
        from operators.settings import training_settings

        settings = training_settings()
    resources = spec.resources.model_dump(exclude_none=True)
    try:
        check_resources(resources, settings)
    except LimitError as err:
        raise SpecError(err.field, err.problem) from None
    wanted, have = int(resources.get("gpu") or 0), len(gpu_devices(settings.local_gpu_devices))
    if wanted > have:
        raise SpecError("resources.gpu", f"{wanted} GPU(s) asked for, but the local backend's worker has {have} "
                        "([training] local_gpu_devices); ask for fewer or use the kubernetes backend")


def check_backend(spec: JobSpec) -> None:
    if spec.backend == "kubernetes":
        check_kubernetes()
    elif spec.backend == "docker":
        check_docker()


def check_kubernetes() -> None:
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
                        f"({_short(err)}); check the connection or the cluster") from None


def check_docker() -> None:
    from operators.settings import docker_settings

    url = docker_settings().docker_url
    try:
        import docker

        client = docker.APIClient(base_url=url, version="auto", timeout=PING_TIMEOUT_SECONDS)
        client.ping()
        client.close()
    except Exception as err:
        raise SpecError("backend", f"is docker but the Docker engine at {url} does not answer ({_short(err)}); "
                        "start it or set [training.docker] docker_url") from None


def _short(err: Any) -> str:
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def check_world(spec: JobSpec, local_roots: tuple[str, ...] = (), areas: dict | None = None) -> None:
    """Every cheap check of the world, in the order a user would fix them."""
    from operators.spec.secret_refs import check_references

    check_local_paths(spec, local_roots, areas)
    check_isolation_options(spec)
    check_local_resources(spec)
    check_connections(spec)
    check_references(spec.secret_references())
    check_backend(spec)

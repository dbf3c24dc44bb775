"""The first task's checks of the world: connections, local paths, and the backend's cluster or engine.

The Kubernetes check runs against the fake API server on loopback (tests/fake_kube_api.py, until the real control
plane of issue 14 lands) and a closed port; the Docker check against a closed port (a running engine is covered by
tests/integration/test_docker_engine.py).
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from operators.launch.spec import validate_spec
from operators.launch.checks import check_world
from operators.launch.registry import backend_checks
from operators.jobspec.checks import check_connections, check_local_paths
from operators.jobspec.errors import SpecError

BASE = {"job_name": "j", "source_dir": "s3://b/code/", "output_path": "s3://b/models", "entry_point": "train.py"}
AWS = json.dumps({"conn_type": "aws", "extra": {"endpoint_url": "http://127.0.0.1:1"}})


def check_backend(spec) -> None:
    """Whether the spec's backend answers (operators/launch/<backend>/checks.py)."""
    backend_checks(spec.backend).check_reachable()

def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fails(fn, *args) -> SpecError:
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        fn(*args)
    assert time.monotonic() - started < 15, "a check must answer within seconds"
    assert "\n" not in str(err.value)
    return err.value


def test_every_scheme_needs_its_connection(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_COS_DEFAULT", raising=False)
    err = fails(check_connections, validate_spec({**BASE, "source_dir": "cos://b/code/"}))
    assert err.field == "source_dir" and "connection 'cos_default' does not exist" in str(err)
    monkeypatch.setenv("AIRFLOW_CONN_COS_DEFAULT", AWS)
    check_connections(validate_spec({**BASE, "source_dir": "cos://b/code/"}))
    check_connections(validate_spec(BASE))  # s3:// with aws_default may use boto3's own credential chain


def test_a_named_connection_must_exist_and_be_of_type_aws(monkeypatch):
    spec = validate_spec({**BASE, "inputs": {"train": "oss://b/train/"}, "connections": {"oss": "my_oss"}})
    assert fails(check_connections, spec).field == "inputs.train"
    monkeypatch.setenv("AIRFLOW_CONN_MY_OSS", json.dumps({"conn_type": "http", "host": "x"}))
    assert "of type 'http'" in str(fails(check_connections, spec))
    spec = validate_spec({**BASE, "connections": {"obs": "nope"}})
    assert fails(check_connections, spec).field == "connections.obs"


def test_local_paths_exist_are_writable_and_stay_under_the_roots(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    spec = validate_spec({**BASE, "source_dir": str(code), "output_path": str(tmp_path / "out" / "new"),
                          "inputs": {"train": f"file://{tmp_path}/data/"}})
    err = fails(check_local_paths, spec, ())
    assert err.field == "inputs.train" and "does not exist" in str(err)
    (tmp_path / "data").mkdir()
    check_local_paths(spec, ())
    check_local_paths(spec, (str(tmp_path),))
    err = fails(check_local_paths, spec, ("/srv/training",))
    assert err.field == "source_dir" and "outside the local roots" in str(err)
    (tmp_path / "file").write_text("x")
    spec = validate_spec({**BASE, "output_path": str(tmp_path / "file" / "models")})
    err = fails(check_local_paths, spec, ())
    assert err.field == "output_path" and "not writable" in str(err)


def test_kubernetes_without_a_cluster_fails_naming_the_backend(monkeypatch, tmp_path):
    for name in ("AIRFLOW_CONN_KUBERNETES_DEFAULT", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    err = fails(check_backend, validate_spec({**BASE, "backend": "kubernetes"}))
    assert err.field == "backend" and "no cluster is configured" in str(err)


def kube_connection(monkeypatch, tmp_path, server: str) -> None:
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": {"server": server}}],
              "users": [{"name": "u", "user": {"token": "t"}}], "current-context": "x",
              "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(tmp_path / "kubeconfig")}}))


def test_kubernetes_with_an_unreachable_cluster_fails_fast(monkeypatch, tmp_path):
    kube_connection(monkeypatch, tmp_path, f"http://127.0.0.1:{closed_port()}")
    err = fails(check_backend, validate_spec({**BASE, "backend": "kubernetes"}))
    assert err.field == "backend" and "does not answer" in str(err)


def test_kubernetes_with_an_answering_api_server_passes(monkeypatch, tmp_path):
    from fake_kube_api import FakeKubeApi

    api = FakeKubeApi().start()
    try:
        kube_connection(monkeypatch, tmp_path, api.url)
        check_backend(validate_spec({**BASE, "backend": "kubernetes"}))
    finally:
        api.stop()


def test_docker_without_an_engine_fails_fast(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_DOCKER__DOCKER_URL", f"tcp://127.0.0.1:{closed_port()}")
    err = fails(check_backend, validate_spec({**BASE, "backend": "docker"}))
    assert err.field == "backend" and "Docker engine" in str(err) and "does not answer" in str(err)


def test_world_checks_run_paths_first(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_DOCKER__DOCKER_URL", f"tcp://127.0.0.1:{closed_port()}")
    spec = validate_spec({**BASE, "backend": "docker", "source_dir": str(tmp_path / "nope")})
    assert fails(check_world, spec).field == "source_dir"
    assert os.listdir(tmp_path) == []  # nothing was created


def test_a_reference_that_cannot_be_read_fails_the_first_task(monkeypatch):
    monkeypatch.delenv("AIRFLOW_VAR_ABSENT_KEY", raising=False)
    spec = validate_spec({**BASE, "environment": {"WANDB_API_KEY": {"variable": "absent_key"}}})
    err = fails(check_world, spec)
    assert err.field == "environment.WANDB_API_KEY" and "'absent_key' cannot be read" in str(err)


def test_a_source_dir_in_another_users_staged_code_is_refused(tmp_path, monkeypatch):
    from operators.settings import TrainingSettings

    settings = TrainingSettings(workspace=str(tmp_path / "ws"))
    mine, theirs = settings.user_code_dir("alice"), settings.user_code_dir("bob")
    for folder in (mine, theirs):
        os.makedirs(folder)
        open(os.path.join(folder, "ab" * 32 + ".tar.gz"), "wb").close()
    archive = "ab" * 32 + ".tar.gz"
    spec = validate_spec({**BASE, "source_dir": os.path.join(mine, archive), "output_path": str(tmp_path / "out")})
    check_local_paths(spec, (str(tmp_path / "out"),), settings.platform_areas_for("alice"))
    for user in ("bob", None):  # another user, or a run nobody triggered (a schedule)
        err = fails(check_local_paths, spec, (str(tmp_path / "out"),), settings.platform_areas_for(user))
        assert str(err).startswith("source_dir: ") and "another user uploaded" in str(err)
    for source in (os.path.join(theirs, archive), settings.code_staging_dir):  # theirs, or everyone's at once
        other = validate_spec({**BASE, "source_dir": source, "output_path": str(tmp_path / "out")})
        assert "another user uploaded" in str(fails(check_local_paths, other, (), settings.platform_areas_for("alice")))


def test_a_local_job_asking_for_more_than_the_admin_allows_or_the_worker_has_is_refused_naming_the_field(tmp_path):
    from dataclasses import replace

    from operators.settings import training_settings
    from operators.launch.local.checks import check_options as check_local_resources

    for i in range(2):
        (tmp_path / f"nvidia{i}").write_text("")  # no GPU here: files stand in for the device nodes
    settings = replace(training_settings(), local_max_memory="8Gi", local_max_cpu="4",
                       local_gpu_devices=str(tmp_path / "nvidia[0-9]*"))
    local = {**BASE, "backend": "local"}
    for resources, field, words in (({"memory": "16Gi"}, "resources.memory", "16Gi is more than the local backend "
                                      "allows per host (8Gi, [training] local_max_memory)"),
                                     ({"cpu": 8}, "resources.cpu", "[training] local_max_cpu"),
                                     ({"gpu": 3}, "resources.gpu", "3 GPU(s) asked for, but the local backend's worker "
                                      "has 2")):
        err = fails(check_local_resources, validate_spec({**local, "resources": resources}), settings)
        assert err.field == field and words in str(err), str(err)
    check_local_resources(validate_spec({**local, "resources": {"memory": "8Gi", "cpu": "4", "gpu": 2}}), settings)
    backend_checks("docker").check_options(validate_spec({**BASE, "backend": "docker", "resources": {"memory": "64Gi"}}))


def test_a_job_asking_for_more_disk_than_the_admins_cap_is_refused_before_anything_is_staged(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__JOB_DISK_LIMIT", "10Gi")
    code = tmp_path / "code"
    code.mkdir()
    spec = validate_spec({**BASE, "source_dir": str(code), "output_path": str(tmp_path / "out"),
                          "resources": {"disk": "20Gi"}})
    err = fails(check_world, spec)
    assert str(err) == ("resources.disk: 20Gi is more than a job root may hold here (10Gi, [training] job_disk_limit); "
                        "ask for at most 10Gi")
    check_world(validate_spec({**BASE, "source_dir": str(code), "output_path": str(tmp_path / "out"),
                               "resources": {"disk": "5Gi"}}))

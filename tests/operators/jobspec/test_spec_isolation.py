"""Spec fields that would weaken isolation are refused in the first task with one line naming the field: Docker's
user (root by number), Docker's host_workspace (an admin setting), and Kubernetes fields an admin profile decides."""

from __future__ import annotations

import pytest

from operators.launch.kubernetes.settings import KubernetesSettings
from operators.launch.spec import validate_spec
from operators.launch.kubernetes.checks import check_options as check_isolation_options
from operators.launch.registry import backend_checks
from operators.jobspec.errors import SpecError

BASE = {"job_name": "j", "source_dir": "s3://b/code/", "output_path": "s3://b/models", "entry_point": "train.py"}
PROFILES = {"team-a": {"namespace": "team-a", "service_account": "trainer",
                       "security_context": {"fsGroup": 2000}}}
SETTINGS = KubernetesSettings(namespace="training", profiles=PROFILES)


def refused(raw) -> str:
    with pytest.raises(SpecError) as err:
        spec = validate_spec(raw)
        check_isolation_options(spec, SETTINGS)
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("user", ["00", "0:0", "root", "1000:0"])
def test_a_docker_user_that_is_root_by_number_is_refused(user):
    text = refused({**BASE, "backend": "docker", "docker": {"user": user}})
    assert text.startswith("docker.user: ") and "never run as root" in text and "1000:1000" in text


def test_a_non_root_docker_user_passes():
    spec = validate_spec({**BASE, "backend": "docker", "docker": {"user": "1000:1000"}})
    assert spec.backend_options() == {"user": "1000:1000"}


def test_host_workspace_is_an_admin_setting():
    text = refused({**BASE, "backend": "docker", "docker": {"host_workspace": "/etc"}})
    assert text.startswith("docker.host_workspace: ") and "[training.docker] host_workspace" in text


@pytest.mark.parametrize("field, value", [
    ("namespace", "kube-system"),
    ("service_account", "cluster-admin"),
    ("workspace_pvc", "other-team-data"),
    ("workspace_subpath", "../other"),
    ("security_context", {"runAsUser": 0}),
    ("container_security_context", {"privileged": True}),
    ("run_as_user", 2000),
])
def test_kubernetes_fields_of_a_profile_are_refused_in_the_spec(field, value):
    text = refused({**BASE, "backend": "kubernetes", "kubernetes": {field: value}})
    assert text.startswith(f"kubernetes.{field}: ") and "kubernetes.profile" in text and "team-a" in text


def test_run_as_user_zero_is_refused_by_the_model():
    text = refused({**BASE, "backend": "kubernetes", "kubernetes": {"run_as_user": 0}})
    assert text.startswith("kubernetes.run_as_user")


def test_a_spec_names_a_profile_and_may_repeat_its_values():
    for options in ({"profile": "team-a"}, {"profile": "team-a", "namespace": "team-a"}, {"namespace": "training"},
                    {"security_context": {}}):
        check_isolation_options(validate_spec({**BASE, "backend": "kubernetes", "kubernetes": options}), SETTINGS)


def test_an_unknown_profile_names_the_known_ones():
    text = refused({**BASE, "backend": "kubernetes", "kubernetes": {"profile": "root-team"}})
    assert text.startswith("kubernetes.profile: ") and "default, team-a" in text


def test_another_backends_section_is_not_checked():
    spec = validate_spec({**BASE, "backend": "local", "kubernetes": {"namespace": "x"}})
    backend_checks(spec.backend).check_options(spec)  # the local backend's checks: the kubernetes section is not theirs

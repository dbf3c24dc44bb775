"""A spec's kubernetes.profile resolves to the admin's namespace, service account, workspace and security contexts."""

from __future__ import annotations

import pytest
from kubernetes_job_samples import make_request

from operators.launch.kubernetes.manifests import job_manifest
from operators.launch.kubernetes.options import resolve_options
from operators.launch.kubernetes.profiles import profiles
from operators.launch.kubernetes.settings import KubernetesSettings

SETTINGS = KubernetesSettings(namespace="training", profiles={
    "team-a": {"namespace": "team-a", "service_account": "trainer", "workspace_pvc": "team-a-ws",
               "security_context": {"fsGroup": 2000}, "container_security_context": {"readOnlyRootFilesystem": True},
               "run_as_user": 3000}})


def test_the_default_profile_is_the_settings():
    options = resolve_options({}, SETTINGS)
    assert (options.namespace, options.service_account, options.run_as_user) == ("training", "", 1000)


def test_a_named_profile_reaches_the_pod():
    options = resolve_options({"profile": "team-a"}, SETTINGS)
    assert (options.namespace, options.service_account, options.workspace_pvc, options.run_as_user) == (
        "team-a", "trainer", "team-a-ws", 3000)
    manifest = job_manifest(make_request(options={"profile": "team-a"}), options, "training-runtime:1")
    pod = manifest["spec"]["template"]["spec"]
    assert manifest["metadata"]["namespace"] == "team-a" and pod["serviceAccountName"] == "trainer"
    assert pod["securityContext"]["fsGroup"] == 2000 and pod["securityContext"]["runAsUser"] == 3000


def test_an_unknown_profile_and_a_bad_setting_are_one_line():
    with pytest.raises(ValueError, match="kubernetes option 'profile' is 'nope'.*use one of: default, team-a"):
        resolve_options({"profile": "nope"}, SETTINGS)
    with pytest.raises(ValueError, match=r"profiles.x must be an object of namespace.*\(not 'hostPID'\)"):
        profiles(KubernetesSettings(profiles={"x": {"hostPID": True}}))

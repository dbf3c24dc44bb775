"""Per-job Kubernetes options over the [training.kubernetes] settings, one clear line for a bad option, and no
credential ever written into a pod spec (refused as a literal, passed as a Secret reference)."""

from __future__ import annotations

import json

import pytest
from kubernetes_job_samples import WORKSPACE, build, make_request, validate

from operators.launch.base import LaunchRequest
from operators.jobspec.credentials import SecretInEnvError


def test_per_job_options_override_the_settings():
    job, options = build(
        make_request(
            gpu=1,
            options={
                "namespace": "ml-team",
                "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                "priority_class": "training-low",
                "service_account": "trainer",
                "image_pull_policy": "Always",
                "image_pull_secrets": ["regcred", "mirror-cred"],
                "labels": {"team": "vision", "cost-center": "42"},
                "annotations": {"owner": "vision@example.com"},
                "workspace_pvc": "shared-fs",
                "workspace_subpath": "airflow/workspace",
                "run_as_user": 50000,
                "shm_size": "8Gi",
            },
        )
    )
    validate(job)
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == options.namespace == "ml-team"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["tolerations"][0]["key"] == "dedicated" and pod["tolerations"][1]["key"] == "nvidia.com/gpu"
    assert pod["priorityClassName"] == "training-low"
    assert pod["serviceAccountName"] == "trainer" and pod["automountServiceAccountToken"] is True
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror-cred"}]
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["securityContext"]["runAsUser"] == 50000
    assert job["metadata"]["labels"]["team"] == "vision" == job["spec"]["template"]["metadata"]["labels"]["team"]
    assert job["metadata"]["annotations"]["owner"] == "vision@example.com"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "shared-fs"
    assert pod["containers"][0]["volumeMounts"][0]["subPath"] == "airflow/workspace/jobs/resnet-train"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]

def test_credentials_are_refused_as_literals_and_passed_as_secret_refs():
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    with pytest.raises(SecretInEnvError) as err:
        build(make_request(env={"AWS_SECRET_ACCESS_KEY": secret}))
    assert "AWS_SECRET_ACCESS_KEY" in str(err.value) and secret not in str(err.value)
    assert "secret_env" in str(err.value)
    with pytest.raises(SecretInEnvError):  # an innocent name does not hide a key-shaped value
        build(make_request(env={"NOTES": "use AKIAIOSFODNN7EXAMPLE"}))

    job, _ = build(
        make_request(
            env={
                "TM_LOG_LEVEL": "DEBUG",
                "EXTRA_ARGS": "--lr $(LR)",
                "TRAINING_METRICS_FILE": f"{WORKSPACE}/jobs/resnet-train/output/metrics.jsonl",
            },
            options={
                "secret_env": {"AWS_SECRET_ACCESS_KEY": "s3-credentials/secret_key", "HF_TOKEN": {"name": "hf", "key": "token"}},
                "env_from_secrets": ["wandb-credentials"],
            },
        )
    )
    validate(job)
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"] == {
        "name": "AWS_SECRET_ACCESS_KEY",
        "valueFrom": {"secretKeyRef": {"name": "s3-credentials", "key": "secret_key"}},
    }
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}
    assert env["EXTRA_ARGS"]["value"] == "--lr $$(LR)"  # kept literal, not expanded by Kubernetes
    # A path the Airflow side knows under the job root is where the pod sees it.
    assert env["TRAINING_METRICS_FILE"]["value"] == "/opt/ml/output/metrics.jsonl"
    assert container["envFrom"] == [{"secretRef": {"name": "wandb-credentials"}}]
    assert secret not in json.dumps(job)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"options": {"nodeSelector": {}}}, "kubernetes option 'nodeSelector' is not a known option"),
        ({"options": {"image_pull_policy": "Sometimes"}}, "image_pull_policy"),
        ({"options": {"labels": {"team": "vision team"}}}, "labels.team"),
        ({"options": {"secret_env": {"TOKEN": "no-key"}}}, "secret_env.TOKEN"),
    ],
)
def test_bad_option_gives_one_clear_line(change, message):
    base = make_request()
    request = LaunchRequest.from_dict({**base.to_dict(), **change})
    with pytest.raises(ValueError) as err:
        build(request)
    assert message in str(err.value)
    assert "\n" not in str(err.value)

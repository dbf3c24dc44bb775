"""The Job and Service manifests: valid for the Kubernetes API (kubernetes-validate, strict schema), valid
names and labels, the restricted Pod Security profile, mounts per layout, resources, and no credential
ever written into a pod spec."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from operators.hooks.launcher import LaunchRequest
from operators.kubernetes_manifests import (
    LAYOUT_ROOTS,
    MAX_NAME_LENGTH,
    SecretInEnvError,
    host_names,
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_key,
    is_label_value,
    job_manifest,
    kube_name,
    resolve_options,
    restricted_profile_violations,
    service_manifest,
)
from operators.settings import KubernetesSettings

K8S_VERSIONS = ("1.29.0", "1.33.0", "1.34.0")  # the oldest supported, and current ones
WORKSPACE = "/mnt/workspace"
SETTINGS = KubernetesSettings()


def make_request(job_name="resnet-train", hosts=1, layout="ti", gpu=0, options=None, env=None, **extra):
    return LaunchRequest(
        job_name=job_name,
        job_root=f"{WORKSPACE}/jobs/{job_name}",
        workspace=WORKSPACE,
        layout=layout,
        instance_count=hosts,
        hosts=tuple(host_names(kube_name(job_name), hosts)),
        channel_entries={
            "train": f"{WORKSPACE}/cache/3f2a9c/train",
            "validation": f"{WORKSPACE}/cache/77b0e1",
        },
        image_uri="registry.example.com/ml/training-runtime:1.4",
        resources={"cpu": 4, "memory": "16Gi", "gpu": gpu},
        max_run_seconds=extra.pop("max_run_seconds", 7200),
        env=env or {"TM_LOG_LEVEL": "INFO"},
        options=options or {},
        **extra,
    )


def build(request):
    options = resolve_options(request.options, SETTINGS)
    return job_manifest(request, options, request.image_uri), options


def validate(manifest):
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


def all_labels(manifest):
    yield from manifest["metadata"].get("labels", {}).items()
    template = manifest.get("spec", {}).get("template")
    if template:
        yield from template["metadata"].get("labels", {}).items()


@pytest.mark.parametrize("hosts", [1, 4])
@pytest.mark.parametrize("layout", sorted(LAYOUT_ROOTS))
@pytest.mark.parametrize("gpu", [0, 2])
def test_job_and_service_are_valid_kubernetes_objects(hosts, layout, gpu):
    request = make_request(hosts=hosts, layout=layout, gpu=gpu)
    job, options = build(request)
    name = job["metadata"]["name"]
    service = service_manifest(name, options.namespace, options.labels, owner_uid="0b8e3c1a-1111-2222-3333-444455556666")
    validate(job)
    validate(service)

    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", hosts, hosts)
    pod = spec["template"]["spec"]
    # Hosts: <job>-<index>.<service>; the pod's subdomain is the headless Service.
    assert pod["subdomain"] == service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert host_names(name, hosts) == [f"{name}-{i}.{name}" for i in range(hosts)]

    # Names and labels a real API server accepts.
    assert is_dns1035_label(name) and is_dns1123_label(f"{name}-{hosts - 1}")
    for host in host_names(name, hosts):
        assert all(is_dns1123_label(part) for part in host.split("."))
    for key, value in list(all_labels(job)) + list(all_labels(service)):
        assert is_label_key(key) and is_label_value(value), (key, value)

    # The job root at the layout's root, each cache entry read-only at input/data/<channel>.
    container = pod["containers"][0]
    root = LAYOUT_ROOTS[layout]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[root]["subPath"] == "jobs/resnet-train" and not mounts[root].get("readOnly")
    assert mounts[f"{root}/input/data/train"] == {
        "name": "workspace",
        "mountPath": f"{root}/input/data/train",
        "subPath": "cache/3f2a9c/train",
        "readOnly": True,
    }
    assert mounts[f"{root}/input/data/validation"]["subPath"] == "cache/77b0e1"
    assert pod["volumes"][0] == {"name": "workspace", "persistentVolumeClaim": {"claimName": "training-workspace"}}
    assert container["args"] == ["train", "--root", root] and "command" not in container

    # Resources: Guaranteed cpu/memory; GPUs as nvidia.com/gpu limits (and the usual GPU-node taint tolerated).
    resources = container["resources"]
    assert resources["requests"] == {"cpu": "4", "memory": "16Gi"}
    assert resources["limits"].get("nvidia.com/gpu") == (str(gpu) if gpu else None)
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert (gpu_toleration in pod.get("tolerations", [])) == bool(gpu)

    assert restricted_profile_violations(pod) == []


def test_restricted_profile_by_default_and_what_breaks_it():
    job, _ = build(make_request())
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["automountServiceAccountToken"] is False  # training code gets no API token by default

    loosened, _ = build(
        make_request(
            options={
                "security_context": {"runAsUser": 0, "runAsNonRoot": False},
                "container_security_context": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
            }
        )
    )
    validate(loosened)  # still a valid object: overrides are the admin's call, the launcher only warns
    problems = restricted_profile_violations(loosened["spec"]["template"]["spec"])
    assert "container 'train' is privileged" in problems
    assert "container 'train' runs as user 0" in problems
    assert any("SYS_ADMIN" in p for p in problems) and any("drop ALL" in p for p in problems)


def test_lifecycle_fields_failure_policy_deadline_and_cleanup():
    job, _ = build(make_request(hosts=4, max_run_seconds=3600))
    spec = job["spec"]
    assert spec["activeDeadlineSeconds"] == 3600
    assert spec["ttlSecondsAfterFinished"] == 600
    assert spec["backoffLimit"] == 2
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onExitCodes": {"containerName": "train", "operator": "In", "values": [1, 2, 3]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    kept, _ = build(make_request(max_run_seconds=None, options={"keep_finished_jobs": True, "backoff_limit": 0}))
    assert "ttlSecondsAfterFinished" not in kept["spec"] and "activeDeadlineSeconds" not in kept["spec"]
    assert kept["spec"]["backoffLimit"] == 0
    validate(kept)


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


@pytest.mark.parametrize(
    "job_name",
    [
        "my-job",
        "My_Job",
        "2024-retrain",
        "nightly.retrain/cos://bucket/prefix with spaces",
        "a" * 200,
        "resnet50-imagenet-" + "x" * 34,  # exactly MAX_NAME_LENGTH
        "resnet50-imagenet-" + "x" * 35,  # one over
    ],
)
def test_names_are_valid_deterministic_and_distinct(job_name):
    name = kube_name(job_name)
    assert name == kube_name(job_name)  # a retry finds the same Job
    assert is_dns1035_label(name) and len(name) <= MAX_NAME_LENGTH
    assert is_dns1123_label(f"{name}-9999999999")  # pod hostname <name>-<index> stays a DNS label
    job, _ = build(make_request(job_name=job_name, hosts=4))
    validate(job)
    assert job["metadata"]["annotations"]["airflow-training-jobs/job-name"] == job_name
    for key, value in all_labels(job):
        assert is_label_key(key) and is_label_value(value)


def test_names_keep_valid_job_names_and_never_collide():
    assert kube_name("my-job") == "my-job"
    assert kube_name("My_Job") != kube_name("my-job")
    assert kube_name("My_Job") != kube_name("my_job")
    assert kube_name("a" * 200) != kube_name("a" * 201)
    assert kube_name("2024-retrain")[0].isalpha()  # a Service name must start with a letter
    assert is_dns1123_subdomain("airflow-training-jobs")


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
        ({"env": {"TRAINING_CURRENT_HOST": "algo-1"}}, "TRAINING_CURRENT_HOST is set by the launcher"),
        ({"resources": {"cpu": 2, "memory": "lots"}}, "resources.memory is 'lots'"),
        ({"resources": {"gpu": 1.5}}, "resources.gpu"),
        ({"layout": "azure"}, "layout 'azure'"),
        ({"job_root": "/tmp/elsewhere"}, "job root /tmp/elsewhere is not inside the workspace"),
        ({"channel_entries": {"train data": f"{WORKSPACE}/cache/x"}}, "channel name 'train data'"),
    ],
)
def test_bad_input_gives_one_clear_line(change, message):
    base = make_request()
    request = LaunchRequest.from_dict({**base.to_dict(), **change})
    with pytest.raises(ValueError) as err:
        build(request)
    assert message in str(err.value)
    assert "\n" not in str(err.value)

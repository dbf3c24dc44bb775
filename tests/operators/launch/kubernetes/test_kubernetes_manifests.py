"""The Job and Service manifests: valid for the Kubernetes API (kubernetes-validate, strict schema), the restricted
Pod Security profile, mounts per layout, resources, lifecycle fields, and one clear line for a bad request."""

from __future__ import annotations

import pytest
from kubernetes_job_samples import WORKSPACE, all_labels, build, make_request, validate

from operators.launch.base import LaunchRequest
from operators.launch.container_env import LAYOUT_ROOTS
from operators.launch.kubernetes.manifests import restricted_profile_violations, service_manifest
from operators.launch.kubernetes.names import host_names, is_dns1123_label, is_label_key, is_label_value
from operators.launch.names import is_dns1035_label


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
    job, _ = build(make_request(hosts=1, max_run_seconds=3600))
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
    # Several hosts share one static rendezvous: no replacement rank; any failure fails the Job (retried whole).
    multi, _ = build(make_request(hosts=4, options={"backoff_limit": 5}))
    assert multi["spec"]["backoffLimit"] == 0
    assert multi["spec"]["podFailurePolicy"]["rules"][1] == {
        "action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    validate(multi)
    kept, _ = build(make_request(max_run_seconds=None, options={"keep_finished_jobs": True, "backoff_limit": 0}))
    assert "ttlSecondsAfterFinished" not in kept["spec"] and "activeDeadlineSeconds" not in kept["spec"]
    assert kept["spec"]["backoffLimit"] == 0
    validate(kept)


@pytest.mark.parametrize("queue", [None, "team-a"])
def test_an_elastic_job_replaces_lost_hosts_up_to_max_restarts_and_still_fails_fast_on_user_errors(queue):
    """Elastic (torchrun's c10d rendezvous takes a replacement): each host's pod is replaced up to max_restarts times
    (backoffLimitPerIndex; a host past it fails the Job), disruptions are not counted, exit codes 1-3 fail the Job at
    once; with a Kueue queue the Job is still created suspended for all its hosts (all-or-nothing admission)."""
    from operators.launch.kubernetes.manifests import job_manifest
    from operators.launch.kubernetes.options import resolve_options
    from operators.launch.kubernetes.settings import KubernetesSettings

    options = {"backoff_limit": 5}
    elastic = {"min_hosts": 2, "max_hosts": 3, "max_restarts": 4}
    request = make_request(hosts=3, options=options, elastic=elastic)
    job = job_manifest(request, resolve_options(options, KubernetesSettings(queue=queue)), request.image_uri)
    validate(job)
    spec = job["spec"]
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (4, 0)
    assert "backoffLimit" not in spec  # the per-index limit bounds the restarts; the backoff_limit option is not used
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onExitCodes": {"containerName": "train", "operator": "In", "values": [1, 2, 3]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["podReplacementPolicy"] == "Failed"  # never two pods of one host at once
    if queue:
        assert spec["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue
        assert not any(k.startswith("kueue.x-k8s.io/job-min-parallelism") for k in job["metadata"]["annotations"])
    # Without elastic the same request is one static rendezvous, as before.
    static, _ = build(make_request(hosts=3, options=options))
    assert static["spec"]["backoffLimit"] == 0 and "backoffLimitPerIndex" not in static["spec"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
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

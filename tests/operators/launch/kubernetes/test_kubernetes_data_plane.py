"""The cluster's data plane on Kubernetes as manifests and checks: the steps' one-pod Jobs, the training Job's init
container, what the admin's profile decides and what a spec may not, and the storage checks validate_spec makes before
anything is staged. (The steps running for real on the real node: tests/integration/test_kubernetes_cluster_data_plane.py.)"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from kubernetes_job_samples import validate

from operators.jobspec.errors import SpecError
from operators.launch.spec import validate_spec
from operators.launch.base import LaunchRequest
from operators.launch.kubernetes.checks import check_options, check_storage
from operators.launch.kubernetes.data_plane import (
    PREPARE_CONTAINER,
    checkpoint_sync_manifest,
    platform_identity_problems,
    step_manifest,
)
from operators.launch.kubernetes.launcher import KubernetesLauncherHook
from operators.launch.kubernetes.manifests import restricted_profile_violations
from operators.launch.kubernetes.options import resolve_options
from operators.launch.kubernetes.profiles import profiles
from operators.launch.steps import STEP_ENV
from operators.launch.kubernetes.settings import KubernetesSettings

CLUSTER = KubernetesSettings(namespace="training", data_plane="cluster", storage_secret="training-storage",
                             data_plane_image="registry.example.com/training-airflow:1.0")


def _spec(**fields):
    raw = {"job_name": "plane", "backend": "kubernetes", "source_dir": "s3://code/train.tar.gz",
           "entry_point": "train.py", "output_path": "s3://out/models", **fields}
    return validate_spec(raw, default_job_name="x", default_base_job_name="x", default_backend="local",
                         default_layout="ti")


def test_a_step_is_a_restricted_one_pod_job_of_the_platform_image_with_the_storage_secret():
    options = resolve_options({}, replace(CLUSTER, data_plane_service_account="storage-reader"))
    manifest = step_manifest("plane-stage-code", "plane", "stage_code", options, workspace="/opt/airflow/training",
                             command=["python3", "-m", "operators.engine.step"], payload={"task_id": "stage_code"},
                             settings_env={"AIRFLOW__TRAINING__WORKSPACE": "/opt/airflow/training"})
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert restricted_profile_violations(pod) == []
    assert manifest["spec"]["backoffLimit"] == 0  # retried as the Airflow task, not in the cluster
    assert container["image"] == "registry.example.com/training-airflow:1.0"
    assert pod["securityContext"]["runAsUser"] == 50000 and pod["securityContext"]["fsGroup"] == 1000
    assert container["envFrom"] == [{"secretRef": {"name": "training-storage"}}]
    assert pod["serviceAccountName"] == "storage-reader" and pod["automountServiceAccountToken"] is True
    # the whole volume at the worker's workspace path: every path in the job's XComs means the same on both sides
    assert container["volumeMounts"] == [{"name": "workspace", "mountPath": "/opt/airflow/training"}]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert json.loads(env[STEP_ENV]) == {"task_id": "stage_code"}
    assert env["AIRFLOW__TRAINING__WORKSPACE"] == "/opt/airflow/training"


def test_the_steps_go_to_the_profiles_data_plane_queue_and_never_to_the_jobs():
    """Where Kueue holds every Job of the namespace (manageJobsWithoutQueueName) a step without a queue would wait for
    ever; with the training's queue it would wait behind the training (its quota)."""
    settings = replace(CLUSTER, queue="team-a", profiles={"gpu": {"data_plane_queue": "gpu-data-plane"}})

    def step_labels(options):
        return step_manifest("plane-stage-code", "plane", "stage_code", resolve_options(options, settings),
                             workspace="/workspace", command=["true"], payload={}, settings_env={})["metadata"]["labels"]

    assert "kueue.x-k8s.io/queue-name" not in step_labels({})
    assert step_labels({"profile": "gpu"})["kueue.x-k8s.io/queue-name"] == "gpu-data-plane"
    queued = replace(settings, data_plane_queue="data-plane")
    assert step_manifest("s", "plane", "restore", resolve_options({}, queued), workspace="/workspace", command=["true"],
                         payload={}, settings_env={})["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "data-plane"
    with pytest.raises(ValueError, match=r"profiles.bad.data_plane_queue is 'no spaces allowed', not a LocalQueue name"):
        profiles(replace(CLUSTER, profiles={"bad": {"data_plane_queue": "no spaces allowed"}}))
    with pytest.raises(SpecError, match="data_plane_queue"):  # a spec never names it: the profile's
        _spec(kubernetes={"data_plane_queue": "mine"})


def test_the_training_job_prepares_its_root_in_an_init_container_and_never_sees_the_storage_secret(tmp_path):
    workspace = tmp_path / "not-here"  # the worker has no volume: nothing is created on its side
    request = LaunchRequest(job_name="plane", job_root=str(workspace / "jobs" / "plane"), workspace=str(workspace),
                            layout="ti", instance_count=2, hosts=("plane-0.plane", "plane-1.plane"),
                            channel_entries={"train": str(workspace / "cache" / "c0ffee")},
                            image_uri="training-base:latest", resources={"cpu": "1"}, max_run_seconds=60,
                            env={}, options={})
    manifest = KubernetesLauncherHook(settings=CLUSTER).job_manifest(request)
    pod = manifest["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["name"] == PREPARE_CONTAINER and init["image"] == CLUSTER.data_plane_image
    assert init["command"][-2:] == [request.job_root, f"{request.job_root}/input/data/train"]
    # the launch is recorded where no training pod mounts, with the Job's uid (a retry after the TTL reads it)
    assert init["command"][3:6] == ["prepare", "--state", str(workspace / "state" / "plane")]
    assert init["env"] == [{"name": "TRAINING_JOB_UID", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}}]
    assert all(mount["mountPath"] != str(workspace) for mount in pod["containers"][0]["volumeMounts"])
    assert init["securityContext"]["runAsUser"] == 50000
    assert pod["securityContext"]["fsGroup"] == 1000  # the group the steps wrote the job root through
    assert "envFrom" not in pod["containers"][0] and "envFrom" not in init
    assert restricted_profile_violations(pod) == []
    assert not workspace.exists()


def _checkpoint_request(**fields) -> LaunchRequest:
    return LaunchRequest(job_name="plane", job_root="/ws/jobs/plane", workspace="/ws", layout="ti", instance_count=2,
                         hosts=("plane-0.plane", "plane-1.plane"), image_uri="training-base:latest",
                         max_run_seconds=3600,
                         checkpoints={"dir": "/ws/jobs/plane/checkpoints", "uri": "s3://ckpt/plane/",
                                      "job_root": "/ws/jobs/plane", "interval": 60, "connections": {}}, **fields)


IDENTITY = replace(CLUSTER, service_account="training-runner", data_plane_service_account="storage-writer")


def test_no_container_of_a_training_pod_holds_a_storage_credential_or_the_data_planes_token():
    """With a checkpoint_path (what used to put the sync beside the training), a storage Secret and a data-plane
    service account: the training pod's containers reference no Secret of the platform, and the pod runs under the
    training's own service account, never the data plane's (whose token, and on EKS / GKE its cloud role, every
    container of a pod gets)."""
    manifest = KubernetesLauncherHook(settings=IDENTITY).job_manifest(_checkpoint_request())
    validate(manifest)  # the API's schema (kubernetes-validate, strict)
    pod = manifest["spec"]["template"]["spec"]
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    assert [c["name"] for c in containers] == [PREPARE_CONTAINER, "train"]  # no sync container in the training pod
    for container in containers:
        assert "envFrom" not in container, container["name"]
        assert not [e for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})], container["name"]
    assert not [v for v in pod["volumes"] if "secret" in v or "projected" in v]
    assert pod["serviceAccountName"] == "training-runner" and pod["automountServiceAccountToken"] is True
    assert platform_identity_problems(pod, resolve_options({}, IDENTITY)) == []
    assert restricted_profile_violations(pod) == []


def test_checkpoints_sync_from_a_one_pod_job_of_the_platform_under_the_data_planes_identity():
    options = resolve_options({}, IDENTITY)
    manifest = checkpoint_sync_manifest("plane-checkpoint-sync", _checkpoint_request(), options,
                                        {"AIRFLOW__TRAINING__WORKSPACE": "/ws"}, mark_existing=True)
    validate(manifest)
    pod = manifest["spec"]["template"]["spec"]
    (sync,) = pod["containers"]
    assert sync["name"] == "checkpoint-sync" and sync["image"] == CLUSTER.data_plane_image
    assert sync["command"][-1] == "operators.engine.checkpoint_sync"
    assert pod["serviceAccountName"] == "storage-writer" and pod["automountServiceAccountToken"] is True
    assert sync["envFrom"] == [{"secretRef": {"name": "training-storage"}}]
    assert pod["securityContext"]["runAsUser"] == 50000  # the data plane's uid, not the training's
    # the job root only, read-only: not the workspace's state/, not another job's root
    assert sync["volumeMounts"] == [{"name": "workspace", "mountPath": "/ws/jobs/plane", "readOnly": True,
                                     "subPath": "jobs/plane"}]
    # ready once it knows what was restored (the launcher creates the training then), time for the last pass
    assert sync["readinessProbe"]["exec"]["command"] == ["test", "-e", "/tmp/checkpoint-sync-ready"]
    assert pod["terminationGracePeriodSeconds"] >= 60
    config = json.loads({e["name"]: e["value"] for e in sync["env"]}["TRAINING_CHECKPOINT_SYNC"])
    assert config["uri"] == "s3://ckpt/plane/" and config["mark_existing"] is True
    assert manifest["spec"]["backoffLimit"] == 0 and manifest["spec"]["activeDeadlineSeconds"] > 3600
    assert restricted_profile_violations(pod) == []


def test_the_platforms_identity_beside_the_tenant_is_refused_naming_what_would_carry_it():
    # the admin's profile: a training service account that is the data plane's
    with pytest.raises(ValueError, match=r"profiles.shared.service_account is 'storage-writer', the data plane's "
                                         r"\(profiles.shared.data_plane_service_account\)"):
        resolve_options({"profile": "shared"}, replace(IDENTITY, profiles={"shared": {
            "service_account": "storage-writer", "data_plane_service_account": "storage-writer"}}))
    with pytest.raises(ValueError, match=r"\] service_account is 'storage-writer', the data plane's"):
        resolve_options({}, replace(IDENTITY, service_account="storage-writer"))
    # a spec naming the storage Secret for the training's environment: refused in validate_spec, one line
    with pytest.raises(SpecError, match=r"kubernetes.env_from_secrets: names Secret 'training-storage', the "
                                        r"platform's storage Secret"):
        check_options(_spec(kubernetes={"env_from_secrets": ["training-storage"]}), IDENTITY)
    with pytest.raises(SpecError, match=r"kubernetes.secret_env.AWS_SECRET_ACCESS_KEY: names Secret "
                                        r"'training-storage'"):
        check_options(_spec(kubernetes={"secret_env": {"AWS_SECRET_ACCESS_KEY": "training-storage/key"}}), IDENTITY)
    check_options(_spec(kubernetes={"env_from_secrets": ["team-a-tokens"]}), IDENTITY)  # its own: fine
    # the last guard, on the manifest itself
    options = resolve_options({"env_from_secrets": ["training-storage"]}, IDENTITY)
    request = _checkpoint_request()
    hook = KubernetesLauncherHook(settings=IDENTITY)
    hook.options = lambda _request: options
    with pytest.raises(ValueError, match="container 'train' reads the storage Secret training-storage"):
        hook.job_manifest(request)


def test_the_data_plane_is_the_profiles_and_a_spec_cannot_pick_it():
    settings = replace(CLUSTER, data_plane="shared_volume", profiles={"remote-gpus": {
        "namespace": "gpus", "data_plane": "cluster", "storage_secret": "gpu-storage"}})
    assert not resolve_options({}, settings).in_cluster
    chosen = resolve_options({"profile": "remote-gpus"}, settings)
    assert chosen.in_cluster and chosen.storage_secret == "gpu-storage" and chosen.namespace == "gpus"
    with pytest.raises(ValueError, match="kubernetes option 'data_plane' is not a known option"):
        resolve_options({"data_plane": "shared_volume"}, settings)
    with pytest.raises(ValueError, match="profiles.bad.data_plane is 'nfs'; use shared_volume or cluster"):
        profiles(replace(settings, profiles={"bad": {"data_plane": "nfs"}}))


def test_a_local_path_is_refused_when_the_cluster_moves_the_bytes(tmp_path):
    spec = _spec(source_dir=str(tmp_path))
    with pytest.raises(SpecError, match=f"source_dir: {tmp_path} is a local path, but this job's bytes move in the "
                                        "cluster"):
        check_storage(spec, replace(CLUSTER, storage_secret=""))


def test_without_a_storage_secret_only_plain_s3_goes_through_the_pods_identity():
    check_storage(_spec(), replace(CLUSTER, storage_secret=""))  # IRSA / Workload Identity
    with pytest.raises(SpecError, match="inputs.train: uses cos:// through connection 'cos_default', but the "
                                        "cluster's data plane has no storage_secret with key AIRFLOW_CONN_COS_DEFAULT"):
        check_storage(_spec(inputs={"train": "cos://bucket-1250000000/data/"}), replace(CLUSTER, storage_secret=""))

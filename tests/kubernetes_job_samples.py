"""Sample training jobs for the Kubernetes names, options and manifests tests: a LaunchRequest with a shared
workspace and two cached channels, built into a Job manifest over the default [training.kubernetes] settings, and
validated against the Kubernetes OpenAPI schema (kubernetes-validate, strict) of the oldest supported and current
versions."""

from __future__ import annotations

import kubernetes_validate

from operators.launch.base import LaunchRequest
from operators.launch.kubernetes.manifests import job_manifest
from operators.launch.kubernetes.names import host_names
from operators.launch.names import resource_name
from operators.launch.kubernetes.options import resolve_options
from operators.launch.kubernetes.settings import KubernetesSettings

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
        hosts=tuple(host_names(resource_name(job_name), hosts)),
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


"""What the launch stage and the SDK's local mode share: the LaunchRequest a job's spec becomes, and the training's
summary (the launch stage's XCom). The waiting itself (streaming, deferral, early stopping, the disk cap) stays the
launch stage's (operators/stages/launch_training.py): it is the Airflow task's."""

from __future__ import annotations

import os
from typing import Any, Mapping

from training_runtime.contract import METRICS_ECHO_ENV, METRICS_FILE_ENV, METRICS_STREAM

from operators.engine.results import LaunchSummary
from operators.jobspec.model import JobSpec
from operators.launch.base import LaunchRequest, LaunchResult
from operators.launch.declaration import HostPlan
from operators.launch.disk_cap import job_disk_cap


def launch_request(spec: JobSpec, layout, settings, hosts: HostPlan, *,
                   channels: Mapping[str, Mapping[str, Any]] | None = None, volume_here: bool = True,
                   secret_env: Mapping[str, str] | None = None,
                   expected_image_digest: str | None = None) -> LaunchRequest:
    """The request the backend runs for `spec`: `layout` its job root, `settings` the [training] settings (the
    workspace, the default image, the checkpoint sync's interval, the job disk limit), `hosts` the backend's host plan,
    `channels` what prefetch_data returned, `volume_here` whether this process sees the job root (else the backend's
    own pods do: the cluster's data plane), `secret_env` the secrets by reference, resolved (only where the job is
    started), `expected_image_digest` the image digest the run must run (the backend refuses another image with
    IMAGE_ERROR; default: the digest a reproduction's spec pins, `reproduces.image_digest`)."""
    env = spec.literal_environment()  # secrets by reference: in secret_env only
    env[METRICS_FILE_ENV] = os.path.join(layout.root, METRICS_STREAM)
    # Where this process cannot read the metrics stream (the job root is the cluster's), `train` echoes it into the
    # log (runtime/training_runtime/metrics_echo.py). The platform's variable: never a spec's.
    env.pop(METRICS_ECHO_ENV, None)
    if not volume_here:
        env[METRICS_ECHO_ENV] = "1"
    checkpoints = {}
    if spec.checkpoint_path and not volume_here:  # the backend's own pods sync checkpoint_path while it trains
        checkpoints = {"dir": layout.checkpoint_dir, "uri": spec.checkpoint_path, "job_root": layout.root,
                       "interval": settings.checkpoint_sync_seconds, "connections": dict(spec.connections)}
    return LaunchRequest(
        job_name=spec.job_name,
        job_root=layout.root,
        workspace=settings.workspace,
        layout=spec.layout,
        instance_count=spec.instance_count,
        hosts=tuple(hosts.hosts(spec.job_name, spec.instance_count)),
        channel_entries={name: info["entry"] for name, info in (channels or {}).items() if "entry" in info},
        image_uri=spec.image_uri or settings.default_image,
        resources=spec.resources.model_dump(exclude_none=True, exclude={"disk"}),  # per host; disk is per job
        max_run_seconds=spec.max_run_seconds,
        env=env,
        options=spec.backend_options(),  # the section of the job's backend
        metric_definitions=tuple(m.model_dump() for m in spec.metric_definitions),
        elastic=spec.elastic_settings(),
        checkpoints=checkpoints,
        secret_env=dict(secret_env or {}),
        disk_limit=job_disk_cap(spec.resources.disk, settings.job_disk_limit),
        expected_image_digest=expected_image_digest or (spec.reproduces.image_digest if spec.reproduces else None),
    )


def launch_summary(result: LaunchResult, final_metrics: Mapping[str, Any]) -> LaunchSummary:
    """The launch stage's result (and, when the training failed, its "outcome" XCom the console reads), with the
    image digest the backend ran (the run's lineage records it)."""
    return LaunchSummary(result.succeeded, result.exit_code, dict(final_metrics), result.failure_class,
                         dict(result.restarts or {}), result.image_digest)

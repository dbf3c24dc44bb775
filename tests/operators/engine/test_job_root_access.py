"""The job root as the launch sees it (operators/engine/job_root_access.py): on this worker the launch writes
metrics.json, records a failure's reason and holds the disk cap there; where the backend declared a cluster workspace
for the job, it writes nothing there and the series goes to the task's XCom instead."""

from __future__ import annotations

import json
import logging
import os

from operators.engine.job_root_access import JobRootHere, JobRootInCluster, job_root_access
from operators.launch.registry import declaration_for
from operators.tracking.metrics import METRIC_SERIES_KEY

LOG = logging.getLogger("test")


def _collector_with_a_point(access):
    metrics = access.metrics([{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    metrics.feed("loss=0.5")
    return metrics


def test_on_the_worker_the_launch_writes_the_job_roots_metrics_and_failure(make_context):
    ctx = make_context()
    os.makedirs(ctx.layout.output_dir)
    declared = declaration_for(ctx.spec.backend).cluster_workspace(ctx.spec.backend_options())
    access = job_root_access(ctx.layout, declared, log=LOG, push=lambda key, value: None)
    assert isinstance(access, JobRootHere) and access.readable_root == ctx.layout.root
    metrics = _collector_with_a_point(access)
    access.record_final(ctx.layout.root, metrics)
    written = json.loads(open(os.path.join(ctx.layout.output_dir, "metrics.json")).read())
    assert written["final"] == {"loss": 0.5}
    access.record_failure("the first reason")
    access.record_failure("a second one")  # the first (the runtime's own) stays
    assert open(os.path.join(ctx.layout.output_dir, "failure")).read() == "the first reason\n"
    access.record_failure("stopped early: patience", replace=True)
    assert open(os.path.join(ctx.layout.output_dir, "failure")).read() == "stopped early: patience\n"
    assert access.measure(ctx.layout.root, 1) is not None  # over a 1-byte cap
    assert access.trigger_task({"task_id": "launch_training"}) == {}
    claimed = []
    access.claim(lambda: claimed.append(True))
    assert claimed == [True]


def test_in_the_cluster_the_launch_writes_nothing_and_pushes_the_series(tmp_path, make_context):
    ctx = make_context()
    pushed = []
    access = job_root_access(ctx.layout, str(tmp_path / "cluster-volume"), log=LOG,
                             push=lambda key, value: pushed.append((key, value)))
    assert isinstance(access, JobRootInCluster) and access.readable_root is None and access.echoes_metrics
    metrics = _collector_with_a_point(access)
    access.record_live(metrics.to_json())
    access.record_final(ctx.layout.root, metrics)
    access.record_failure("why")
    access.claim(lambda: (_ for _ in ()).throw(AssertionError("the steps claimed it")))
    assert [key for key, _ in pushed] == [METRIC_SERIES_KEY, METRIC_SERIES_KEY]
    assert pushed[-1][1]["final"] == {"loss": 0.5}
    assert access.checkpoint_sync(None, ctx.spec, ctx.settings) is None
    assert access.measure(ctx.layout.root, 1) is None and access.watch_disk(ctx.layout.root, 1, print) is None
    assert access.trigger_task({"task_id": "launch_training"}) == {"series_xcom": {"task_id": "launch_training"}}
    assert not os.path.exists(ctx.layout.root)  # nothing was written where only the cluster's pods look

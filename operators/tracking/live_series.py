"""A deferred task's metric series as its XCom METRIC_SERIES_KEY while the job trains, recorded from the triggerer
(operators/launch/kubernetes/trigger.py), where no metrics.json is written on Airflow's side (the kubernetes backend's
cluster data plane): what the job page draws while the task waits. Airflow 3.1+ lets a trigger set its task's XComs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

from operators.tracking.metrics import LIVE_SERIES_SECONDS, METRIC_SERIES_KEY, MetricCollector

log = logging.getLogger(__name__)


async def record_series(metrics: MetricCollector, task: Mapping[str, Any], stop: asyncio.Event) -> None:
    """metrics.to_json() as the XCom of `task` ({dag_id, task_id, run_id, map_index}) every LIVE_SERIES_SECONDS while
    the series grow, until `stop` is set (a record on its way is finished first)."""
    # lazy: the XCom backend is resolved from the configuration, where the trigger runs
    from airflow.sdk.execution_time.xcom import XCom

    recorded, warned = 0, False
    while True:
        try:
            await asyncio.wait_for(stop.wait(), LIVE_SERIES_SECONDS)
            return  # the trigger's event carries the whole series; the task records it when it resumes
        except asyncio.TimeoutError:
            pass
        points = sum(len(values) for values in list(metrics.series.values()))
        if points == recorded:
            continue
        # A copy taken here: the log's lines go on adding points on this loop while the record is sent.
        snapshot = {"final": metrics.final(),
                    "series": {name: list(values) for name, values in list(metrics.series.items())}}
        try:
            # XCom.set in a thread, not XCom.aset: `airflow dags test` runs a trigger with in-process comms that
            # only send synchronously; the triggerer's comms take a send from another thread through its loop.
            await asyncio.to_thread(XCom.set, key=METRIC_SERIES_KEY, value=snapshot, **task)
        except Exception as err:  # noqa: BLE001 - the curves are a view: the wait and its event matter more
            if not warned:
                log.warning("Could not record the metrics so far as XCom %s: %s", METRIC_SERIES_KEY, err)
                warned = True
            continue
        if not recorded:
            log.info("[metrics] the series so far are recorded as XCom %s every %g s while they grow",
                     METRIC_SERIES_KEY, LIVE_SERIES_SECONDS)
        recorded = points

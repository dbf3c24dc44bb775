"""A 2-host job queued in Kueue and admitted whole on the real node (tools/node/realnode.py): `airflow dags test
training_job` with [training.kubernetes] queue set, the real Kueue controller (tools/kueue) admitting the suspended
Job, the training image running both hosts, which reach each other through the headless Service."""

from __future__ import annotations

import pytest

import kueue
from kube_cluster import make_queues
from test_kubernetes_real_node import conf  # noqa: F401 - the fixture
from test_kubernetes_local_cluster_dag import dags_test, failure_reasons

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.usefixtures("airflow_db")]

TWO_HOSTS = """\
import json, os
print(f"{os.environ['SM_CURRENT_HOST']} of {len(json.loads(os.environ['SM_HOSTS']))} hosts", flush=True)
"""


@pytest.mark.timeout(600)
def test_a_two_host_job_admitted_by_kueue_runs_on_the_real_node(real_cluster, real_namespace, real_admin, conf,  # noqa: F811
                                                                monkeypatch):
    make_queues(real_cluster[0], real_admin["api"], real_namespace, {"cpu": "2", "memory": "2Gi"})
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__QUEUE", "team-a")
    try:
        state, states, _, output, seconds = dags_test(conf("real-queued", TWO_HOSTS, instance_count=2), timeout=400)
    finally:
        kueue.delete_cluster_queue(real_admin["api"], real_namespace)
    assert state == "success", (failure_reasons(), states, output[-4000:])
    assert "admitted by Kueue in team-a" in output, output[-4000:]
    for host in ("real-queued-0", "real-queued-1"):
        assert f"{host}.real-queued of 2 hosts" in output, output[-4000:]
    print(f"\nreal node, 2 hosts admitted by Kueue: {seconds:.1f}s")

"""Secrets by reference through the whole training_job DAG on a real node (containerd + kubelet): the kubelet resolves
the secretKeyRefs, the training script reads both values from its environment. The checks of test_secrets_dag.py's
kubernetes case (the values only in the Job's own Secret) run here too.

A module of its own: the real-node modules all run on one xdist worker (tests/xdist_scheduling.py), and the local,
docker and kwok cases of test_secrets_dag.py need no real node, so they run on any worker."""

from __future__ import annotations

import hashlib
import json
import tarfile

import pytest

from test_secrets_dag import kubernetes_case

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(600)  # also brings a control plane and a real node up (image import included)
def test_secrets_by_reference_reach_the_script_on_a_real_node(tmp_path, monkeypatch, capfd, real_namespace,
                                                              real_admin):
    """The same on a real node (containerd + kubelet): the training script reads both values from its environment
    (the kubelet resolved the secretKeyRefs) and prints them; the task log shows them masked."""
    from real_node import IMAGE

    token, password, models, task_log = kubernetes_case(tmp_path, monkeypatch, capfd, real_namespace, real_admin,
                                                        "secrets-real", IMAGE)
    with tarfile.open(models / "secrets-real" / "output" / "model.tar.gz") as tar:
        seen = json.load(tar.extractfile("model.json"))
    assert seen == {"token": hashlib.sha256(token.encode()).hexdigest(),
                    "password": hashlib.sha256(password.encode()).hexdigest()}
    assert "token is ***, password is ***" in task_log

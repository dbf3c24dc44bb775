"""The local control plane of tools/k8s (localcluster.py) when its start goes wrong: the error a person (or a test
fixture) gets, and the one failure it gets over by itself."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "k8s"))
sys.path.insert(0, str(REPO / "tools" / "kueue"))
import localcluster  # noqa: E402
from localcluster import DEFAULT_BIN_DIR, ClusterError, LocalCluster  # noqa: E402

BIN_DIR = Path(os.environ.get("K8S_BIN") or DEFAULT_BIN_DIR)


def test_a_missing_binary_is_an_error_that_names_it_and_the_make_target(tmp_path):
    with pytest.raises(ClusterError, match=r"/etcd is missing: build the control plane first \(make k8s-tools\)"):
        LocalCluster(tmp_path / "cluster", tmp_path / "no-binaries", kueue_dir=None).up()


def test_a_port_another_process_takes_before_its_part_binds_it_is_given_up_for_another(tmp_path, monkeypatch,
                                                                                         capsys):
    if not (BIN_DIR / "k8s").exists() or not (BIN_DIR / "kwok").exists():
        pytest.skip(f"the control plane is not built in {BIN_DIR}: run `make k8s-tools` (make test does)")
    # What happens on a busy machine: the port chosen for etcd is taken between choosing and binding.
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    choose = localcluster.free_port
    chosen = iter([port])
    monkeypatch.setattr(localcluster, "free_port", lambda: next(chosen, None) or choose())
    cluster = LocalCluster(tmp_path / "cluster", BIN_DIR, kueue_dir=None)
    try:
        cluster.up()
        said = capsys.readouterr().out
        assert "etcd exited during start-up" in said and "address already in use" in said, said
        assert "starting again on other ports" in said, said
        assert port not in cluster.state()["ports"].values()
        assert cluster.running()
    finally:
        cluster.down()
        taken.close()

"""The real node's container runtime on this machine (tools/node/realnode.py without a control plane): Debian's
containerd and runc with the node's own root, socket, bridge and cgroup, the locally built pause image and the
training image copied from the local Docker engine, run with `ctr` as the kubelet's CRI calls would run them.

Skips, with the reason, only when this machine cannot run a node (not root, no containerd/runc/CNI plugins, no
Docker engine) or when the training image is not built (make test builds it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "node"))
from realnode import PAUSE_IMAGE, RealNode, cannot_run_reason  # noqa: E402

pytestmark = [pytest.mark.slow]
IMAGE = os.environ.get("TRAINING_E2E_IMAGE", "training-base:latest")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"this machine cannot run a real node: {reason}")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"the image {IMAGE} is not in the local Docker engine: run `make images` (make test does)")
    node = RealNode(tmp_path_factory.mktemp("node"))
    try:
        yield node.up([IMAGE])
    finally:
        node.down()


def ctr_run(node: RealNode, name: str, *args: str) -> subprocess.CompletedProcess:
    return node.ctr("run", "--rm", *args[:-1], f"docker.io/library/{IMAGE}", name, "sh", "-c", args[-1], check=False,
                    timeout=120)


@pytest.mark.timeout(600)  # the first test imports the image (~20-45 s here)
def test_the_training_image_runs_as_its_user_with_the_runtime(node):
    images = node.ctr("images", "ls", "-q").stdout.split()
    assert PAUSE_IMAGE in images and f"docker.io/library/{IMAGE}" in images
    result = ctr_run(node, "who", "id -u; python3 -c 'import training_runtime; print(\"runtime ok\")'; command -v train")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1000", "runtime", "ok", "/usr/local/bin/train"]


def test_a_memory_limit_is_a_real_oom_kill(node):
    # cgroup v1 memory controller: the kernel kills the allocating process, exit status 137 (SIGKILL).
    result = ctr_run(node, "oom", "--memory-limit", str(64 * 1024 * 1024),
                     "python3 -c 'b = []\nwhile True: b.append(bytearray(8 << 20))'; echo status $?")
    assert "status 137" in result.stdout, (result.stdout, result.stderr)


def test_down_leaves_no_bridge_cgroup_or_process(tmp_path):
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"this machine cannot run a real node: {reason}")
    node = RealNode(tmp_path / "node").up([])
    state = node.state()
    node.down()
    assert f" {state['bridge']}:" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not Path("/sys/fs/cgroup/memory", state["cgroup"]).exists()
    assert not node.running()


def test_a_node_left_by_a_killed_run_gives_its_index_and_image_store_to_the_next(tmp_path):
    # Each index has its own image store (~9 GB with the training images): a killed run's leftover bridge used to
    # push every later node to a fresh index, importing the images again until the disk was full.
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"this machine cannot run a real node: {reason}")
    import signal
    import time

    first = RealNode(tmp_path / "first").up([])
    index = first.state()["index"]
    second = RealNode(tmp_path / "second").up([])
    try:
        assert second.state()["index"] != index, "a running node's index was taken"
    finally:
        second.down()
    containerd = first.state()["pids"]["containerd"]
    os.killpg(containerd, signal.SIGKILL)  # its test process was killed: nothing ever runs first.down()
    deadline = time.monotonic() + 10
    while first.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f" trn{index}:" in links  # what the killed node left
    third = RealNode(tmp_path / "third").up([])
    try:
        assert third.state()["index"] == index
    finally:
        third.down()


def test_two_nodes_started_at_once_take_two_indexes(tmp_path):
    # Two test sessions on one machine start their nodes at the same moment: both used to see the same index free.
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"this machine cannot run a real node: {reason}")
    from concurrent.futures import ThreadPoolExecutor

    nodes = [RealNode(tmp_path / name) for name in ("a", "b")]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda node: node.up([]), nodes))
        indexes = [node.state()["index"] for node in nodes]
        assert indexes[0] != indexes[1] and all(node.running() for node in nodes), indexes
    finally:
        for node in nodes:
            node.down()

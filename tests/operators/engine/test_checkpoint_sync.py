"""`python -m operators.engine.checkpoint_sync` as its pod runs it (operators/launch/kubernetes/data_plane.py's
checkpoint_sync_manifest), on local directories: what was restored is not uploaded back, a checkpoint reaches
checkpoint_path while the training runs, SIGTERM (the deletion of its Job) makes the last pass and says so, and a link
in the checkpoint directory is never followed. (Its lifecycle beside a training: tests/operators/launch/kubernetes/
test_kubernetes_launcher.py; on the real node: tests/integration/test_kubernetes_cluster_data_plane.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from operators.launch.steps import CHECKPOINT_SYNC_DONE, CHECKPOINT_SYNC_ENV


def _until(predicate, what: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120  # a hang guard: the pod's Python imports Airflow first
    while not predicate():
        assert process.poll() is None, f"the sync ended before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.05)


def test_the_sync_pod_uploads_what_the_training_writes_and_makes_its_last_pass_on_sigterm(tmp_path):
    root = tmp_path / "jobs" / "ckpt"
    checkpoints = root / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "restored.pt").write_text("restored by the restore step")
    (tmp_path / "secret.txt").write_text("another tenant's")
    (checkpoints / "stolen.pt").symlink_to(tmp_path / "secret.txt")
    destination, ready = tmp_path / "checkpoint-path", tmp_path / "ready"
    config = {"dir": str(checkpoints), "uri": f"{destination}/", "job_root": str(root), "interval": 0.2,
              "connections": {}, "mark_existing": True}
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    env[CHECKPOINT_SYNC_ENV] = json.dumps(config)
    # the pod's readiness file, here in the test's directory
    entry = ("import operators.engine.checkpoint_sync as pod; "
             f"pod.CHECKPOINT_SYNC_READY_FILE = {str(ready)!r}; pod.exit_now(pod.main())")
    process = subprocess.Popen([sys.executable, "-c", entry], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        _until(ready.exists, "readiness", process)
        (checkpoints / "epoch-1.pt").write_text("state after epoch 1")
        _until((destination / "epoch-1.pt").exists, "epoch-1.pt in checkpoint_path while it runs", process)
        (checkpoints / "epoch-2.pt").write_text("state after epoch 2")
        process.send_signal(signal.SIGTERM)  # the training ended: the launcher deletes the sync's Job
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert (destination / "epoch-2.pt").read_text() == "state after epoch 2"  # the last pass
    assert output.rstrip().endswith(CHECKPOINT_SYNC_DONE), output
    assert sorted(p.name for p in destination.iterdir()) == ["epoch-1.pt", "epoch-2.pt"]  # not restored.pt
    assert "stolen.pt" in output and "symbolic link" in output  # skipped, with a warning naming it

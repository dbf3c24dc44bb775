"""The job-root side of a Kubernetes training Job: group-writable tree for the pods' uid, mount points, and the
launch record that tells a retry after the TTL whether the removed Job succeeded."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from operators.fs.job_root import UnsafePathError
from operators.launch.kubernetes.workspace import (
    main,
    prepare_job_root,
    succeeded_since_launch,
    workspace_group,
    write_launch_record,
)
from operators.state.job_state import KUBERNETES_JOB


def test_job_root_becomes_group_writable_with_mount_points_and_links_untouched(tmp_path):
    cache = tmp_path / "cache" / "entry"
    cache.mkdir(parents=True)
    (cache / "rows.csv").write_text("1\n")
    os.chmod(cache / "rows.csv", 0o644)
    root = tmp_path / "jobs" / "j"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print(1)\n")
    os.chmod(root / "code" / "train.py", 0o600)
    (root / "input" / "data").mkdir(parents=True)
    (root / "input" / "data" / "linked").symlink_to(cache)

    prepare_job_root(str(root), [str(root / "input" / "data" / "train")])

    assert (root / "input" / "data" / "train").is_dir()  # the channel's mount point exists before the pod
    for directory in (root, root / "code", root / "input" / "data" / "train"):
        mode = os.stat(directory).st_mode
        assert mode & stat.S_ISGID and mode & stat.S_IRWXG == stat.S_IRWXG, oct(mode)
    assert os.stat(root / "code" / "train.py").st_mode & 0o060 == 0o060
    assert stat.S_IMODE(os.stat(cache / "rows.csv").st_mode) == 0o644  # the shared cache is not touched
    assert workspace_group(str(root)) == os.stat(root).st_gid


def test_success_after_the_ttl_counts_only_when_newer_than_the_launch(tmp_path):
    root, state = tmp_path / "jobs" / "job", str(tmp_path / "state" / "job")
    (root / "output").mkdir(parents=True)
    assert not succeeded_since_launch(str(root), state)  # never launched
    (root / "output" / "success").write_text("")
    old = time.time() - 60
    os.utime(root / "output" / "success", (old, old))
    write_launch_record(state, "uid-1")
    assert not succeeded_since_launch(str(root), state)  # an earlier run's marker
    (root / "output" / "success").write_text("")
    assert succeeded_since_launch(str(root), state)
    # the file system's clock lags this process's (coarse, or another machine's): a marker stamped a moment before
    # the recorded launch is this launch's
    just_before = json.loads((Path(state) / KUBERNETES_JOB).read_text())["created"] - 0.5
    os.utime(root / "output" / "success", (just_before, just_before))
    assert succeeded_since_launch(str(root), state)


def test_a_success_marker_that_is_a_link_is_no_success(tmp_path):
    # The job root is the job's: a link named success pointing at any newer file must not report a success.
    root, state = tmp_path / "jobs" / "job", str(tmp_path / "state" / "job")
    (root / "output").mkdir(parents=True)
    write_launch_record(state, "uid-1")
    (tmp_path / "elsewhere").write_text("")
    (root / "output" / "success").symlink_to(tmp_path / "elsewhere")
    assert not succeeded_since_launch(str(root), state)
    (tmp_path / "other-output").mkdir()  # nor output/ itself a link to another job's output
    (tmp_path / "other-output" / "success").write_text("")
    (root / "output" / "success").unlink()
    (root / "output").rmdir()
    (root / "output").symlink_to(tmp_path / "other-output")
    assert not succeeded_since_launch(str(root), state)


def test_in_the_cluster_the_init_container_records_the_launch_and_a_step_reports_its_success(tmp_path, monkeypatch):
    # data_plane = cluster: `prepare` (the training Job's init container) and `succeeded` (a retry's step) on the
    # cluster's workspace; the step's answer is its termination message.
    root, state = tmp_path / "jobs" / "job", str(tmp_path / "state" / "job")
    (root / "output").mkdir(parents=True)
    (root / "output" / "success").write_text("")  # an earlier launch's
    message = tmp_path / "termination-log"
    monkeypatch.setenv("TRAINING_TERMINATION_LOG", str(message))
    monkeypatch.setenv("TRAINING_JOB_UID", "uid-7")

    assert main(["prepare", "--state", state, str(root), str(root / "input" / "data" / "train")]) == 0
    assert not (root / "output" / "success").exists()  # an earlier try's outcome is cleared
    assert (root / "input" / "data" / "train").is_dir()
    assert json.loads((Path(state) / KUBERNETES_JOB).read_text())["uid"] == "uid-7"
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert main(["succeeded", "--state", state, str(root)]) == 0
    assert json.loads(message.read_text()) == {"result": False}

    (root / "output" / "success").write_text("")  # what `train` writes last
    assert main(["succeeded", "--state", state, str(root)]) == 0
    assert json.loads(message.read_text()) == {"result": True}


def test_a_launch_record_the_pod_forged_in_the_job_root_is_not_read(tmp_path):
    # The pod mounts the job root: a record there claiming an old launch would make a retry report a stale success.
    root, state = tmp_path / "jobs" / "job", str(tmp_path / "state" / "job")
    (root / "output").mkdir(parents=True)
    (root / "output" / "success").write_text("")
    (root / ".kubernetes-job.json").write_text('{"uid": "forged", "created": 0}')
    assert not succeeded_since_launch(str(root), state)


def test_a_file_swapped_for_a_link_while_the_root_is_prepared_never_passes_its_mode_change_on(tmp_path,
                                                                                             monkeypatch):
    """A running job swaps a file for a link to something outside just after it was looked at: the mode change goes
    to neither (the preparation may run as root)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not the job's")
    outside.chmod(0o600)
    root = tmp_path / "job"
    (root / "model").mkdir(parents=True)
    weights = root / "model" / "weights"
    weights.write_text("w")
    weights.chmod(0o600)
    real_stat, real_open = os.stat, os.open

    def swap(path):
        if os.path.basename(str(path)) == "weights" and not os.path.islink(weights):
            weights.unlink()
            weights.symlink_to(outside)

    def stat_then_swap(path, *args, **kwargs):  # the worst moment for a check: just after it
        result = real_stat(path, *args, **kwargs)
        swap(path)
        return result

    def swap_then_open(path, *args, **kwargs):  # ... for a descriptor: just before it is opened
        swap(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_then_swap)
    monkeypatch.setattr(os, "open", swap_then_open)
    prepare_job_root(str(root), [])
    monkeypatch.undo()
    assert outside.stat().st_mode & 0o777 == 0o600  # the link's target keeps its mode
    assert weights.is_symlink()


def test_a_directory_swapped_for_a_link_while_the_root_is_prepared_changes_nothing_outside(tmp_path, monkeypatch,
                                                                                          caplog):
    """Another host's training runs in the same job root while a pod's init container prepares it: it swaps model/
    for a link to a directory outside just as the walk reaches it. No mode or owner outside changes (by path, only
    the last component was opened without following a link: the files below the swapped directory were changed
    through the link), and the walk says which entry it skipped."""
    outside = tmp_path / "elsewhere"  # e.g. another job's root on the same volume
    outside.mkdir()
    (outside / "weights").write_text("another tenant's")
    (outside / "weights").chmod(0o600)
    (outside / "sub").mkdir()
    (outside / "sub").chmod(0o700)
    outside.chmod(0o700)
    before = {p: (p.stat().st_mode, p.stat().st_uid, p.stat().st_gid) for p in (outside, outside / "weights",
                                                                                  outside / "sub")}
    root = tmp_path / "jobs" / "job"
    (root / "model" / "sub").mkdir(parents=True)
    (root / "model" / "weights").write_text("w")
    (root / "model" / "weights").chmod(0o600)
    (root / "code").mkdir()
    (root / "code" / "train.py").write_text("print(1)\n")
    (root / "code" / "train.py").chmod(0o600)
    real_open = os.open

    def swap_then_open(path, *args, **kwargs):  # the walk reaches model/: the other host swaps it now
        if os.path.basename(str(path)) == "model" and not os.path.islink(root / "model"):
            (root / "model").rename(root / "model.moved")
            (root / "model").symlink_to(outside)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with caplog.at_level("WARNING"):
        prepare_job_root(str(root), [str(root / "input" / "data" / "train")])
    monkeypatch.undo()

    assert (root / "model").is_symlink()  # the swap happened during the walk
    after = {p: (p.stat().st_mode, p.stat().st_uid, p.stat().st_gid) for p in before}
    assert after == before, {str(p): (oct(before[p][0]), oct(after[p][0])) for p in before}
    assert f"Skipped model in job root {root}: it is a symbolic link" in caplog.text
    # the rest of the tree is prepared as before
    assert os.stat(root / "code" / "train.py").st_mode & 0o060 == 0o060
    assert os.stat(root / "input" / "data" / "train").st_mode & stat.S_ISGID


def test_a_hard_link_to_a_file_outside_keeps_that_files_mode(tmp_path):
    """A hard link is the outside file itself: making it group-writable would change the file outside the root."""
    outside = tmp_path / "elsewhere.bin"
    outside.write_text("not the job's")
    outside.chmod(0o600)
    root = tmp_path / "jobs" / "job"
    (root / "model").mkdir(parents=True)
    os.link(outside, root / "model" / "linked.bin")
    prepare_job_root(str(root), [])
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600


def test_a_mount_point_behind_a_link_is_refused_in_one_line(tmp_path, capsys):
    """An earlier try left input/data as a link to a directory outside: the mount point is not created there, and
    the init container says why in one line (its exit fails the Job)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root = tmp_path / "jobs" / "job"
    (root / "input").mkdir(parents=True)
    (root / "input" / "data").symlink_to(outside)

    with pytest.raises(UnsafePathError, match=r"input/data in job root .* is a symbolic link, not a directory"):
        prepare_job_root(str(root), [str(root / "input" / "data" / "train")])
    assert list(outside.iterdir()) == []
    assert main(["prepare", "--state", str(tmp_path / "state"), str(root), str(root / "input" / "data" /
                                                                                 "train")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "input/data in job root" in err and "not followed" in err, err
    assert list(outside.iterdir()) == []


def test_the_pods_of_one_job_record_their_launch_at_the_same_time_without_failing(tmp_path):
    """Every host's init container writes the launch record when its pod starts, often in the same instant: one
    writer's temporary file must never be renamed away under another (a failed init container fails the Job)."""
    from concurrent.futures import ThreadPoolExecutor

    state = str(tmp_path / "state")

    def host(uid: str) -> None:
        for _ in range(200):
            write_launch_record(state, uid)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(host, [f"uid-{i}" for i in range(8)]))  # re-raises a writer's error
    record = json.loads((tmp_path / "state" / KUBERNETES_JOB).read_text())
    assert record["uid"].startswith("uid-") and record["created"] <= time.time()
    assert os.listdir(state) == [KUBERNETES_JOB], "a temporary file was left behind"

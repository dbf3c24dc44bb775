"""operators/fs/job_root.py against real files: what a hostile script can leave in its job root (links at every
component and at the target name, dangling links, links to directories, FIFOs, hostile numbers) must never make the
worker read or write outside the root."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from operators.fs.job_root import JobRoot, UnsafePathError, bounded_int, finite_number, loads_strict

SECRET = b"JWT_SECRET=do-not-leak\n"


@pytest.fixture()
def world(tmp_path):
    """A job root and, beside it, what must stay out of reach: a secret file and a secret directory."""
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    (secret_dir / "airflow-secrets.env").write_bytes(SECRET)
    root = tmp_path / "job"
    (root / "output" / "data").mkdir(parents=True)
    (root / "model").mkdir()
    return root, secret_dir


def test_reads_refuse_a_link_at_the_file_name_and_at_every_directory_on_the_way(world):
    root, secrets = world
    (root / "output" / "failure").symlink_to(secrets / "airflow-secrets.env")
    (root / "model" / "sub").symlink_to(secrets)
    (root / "linked_output").symlink_to(root / "output")  # a link inside the root is refused too
    tree = JobRoot(root)
    for rel in ("output/failure", "model/sub/airflow-secrets.env", "linked_output/data"):
        with pytest.raises(UnsafePathError, match="symbolic link"):
            tree.read_bytes(rel) if rel != "linked_output/data" else tree.ensure_dir(rel)
        assert not tree.is_file(rel)
    assert tree.stat("output/failure") is None


def test_a_dangling_link_is_no_file_and_a_fifo_does_not_hang_the_reader(world):
    root, _ = world
    (root / "output" / "success").symlink_to(root / "nowhere")
    os.mkfifo(root / "output" / "failure")  # nobody ever writes it: an open without O_NONBLOCK would hang
    tree = JobRoot(root)
    assert not tree.is_file("output/success")
    done = threading.Event()

    def read():
        with pytest.raises(UnsafePathError, match="FIFO"):
            tree.read_text("output/failure")
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(30), "reading a FIFO in the job root hung"


def test_read_limits_and_tail(world):
    root, _ = world
    (root / "output" / "big").write_bytes(b"a" * 1000 + b"END")
    tree = JobRoot(root)
    assert tree.read_bytes("output/big", 10) == b"a" * 10
    assert tree.read_bytes("output/big", 3, tail=True) == b"END"
    with pytest.raises(ValueError, match="larger than"):
        tree.read_json("output/big", limit=100)


def test_writes_replace_a_link_at_the_name_and_leave_its_target_alone(world):
    root, secrets = world
    target = secrets / "airflow-secrets.env"
    os.chmod(target, 0o600)
    (root / "output" / "metrics.json").symlink_to(target)
    # the names a writer might use beside the target: none is written through
    (root / "output" / "metrics.json.tmp").symlink_to(target)
    tree = JobRoot(root)
    tree.write_json("output/metrics.json", {"final": {"loss": 0.5}})
    assert target.read_bytes() == SECRET and (target.stat().st_mode & 0o777) == 0o600
    assert not (root / "output" / "metrics.json").is_symlink()
    assert tree.read_json("output/metrics.json") == {"final": {"loss": 0.5}}
    assert sorted(p.name for p in (root / "output").iterdir()) == ["data", "metrics.json", "metrics.json.tmp"]


def test_writes_refuse_a_linked_parent_and_replace_a_directory_at_the_name(world):
    root, secrets = world
    (root / "input").mkdir()
    (root / "input" / "config").symlink_to(secrets)
    tree = JobRoot(root)
    with pytest.raises(UnsafePathError, match="input/config"):
        tree.write_text("input/config/hyperparameters.json", "{}")
    assert sorted(os.listdir(secrets)) == ["airflow-secrets.env"]
    (root / "output" / "failure").mkdir()
    (root / "output" / "failure" / "x").write_text("x")
    tree.write_text("output/failure", "the reason\n")
    assert tree.read_text("output/failure") == "the reason\n"


def test_remove_takes_the_link_itself(world):
    root, secrets = world
    (root / "output" / "success").symlink_to(secrets / "airflow-secrets.env")
    (root / "model" / "tree").symlink_to(secrets)
    tree = JobRoot(root)
    assert tree.remove("output/success") and tree.remove("model/tree")
    assert not tree.remove("output/success")
    assert (secrets / "airflow-secrets.env").read_bytes() == SECRET


def test_walk_yields_only_regular_files_and_directories_and_names_each_skipped_entry(world, caplog):
    root, secrets = world
    model = root / "model"
    (model / "weights.bin").write_bytes(b"w")
    (model / "sub").mkdir()
    (model / "sub" / "a.txt").write_text("a")
    (model / "x").symlink_to(secrets / "airflow-secrets.env")
    (model / "sub" / "dir_link").symlink_to(secrets)
    (model / "dangling").symlink_to(root / "nowhere")
    os.mkfifo(model / "fifo")
    with caplog.at_level(logging.WARNING):
        entries = [(e.rel, e.is_dir) for e in JobRoot(root).walk("model")]
    assert entries == [("sub", True), ("sub/a.txt", False), ("weights.bin", False)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name, what in (("model/x", "symbolic link"), ("model/sub/dir_link", "symbolic link"),
                       ("model/dangling", "symbolic link"), ("model/fifo", "FIFO")):
        assert any(f"Skipped {name} " in w and what in w for w in warnings), (name, warnings)


def test_a_file_swapped_for_a_link_between_the_walk_and_the_open_is_refused(world):
    root, secrets = world
    (root / "model" / "w.bin").write_bytes(b"w")
    tree = JobRoot(root)
    for entry in tree.walk("model"):
        os.remove(root / "model" / "w.bin")
        os.symlink(secrets / "airflow-secrets.env", root / "model" / "w.bin")
        with pytest.raises(UnsafePathError):
            tree.open_at(entry.dir_fd, entry.name, entry.rel)


def test_remove_links_clears_links_below_a_directory_and_a_link_at_it(world, caplog):
    root, secrets = world
    (root / "checkpoints" / "sub").mkdir(parents=True)
    (root / "checkpoints" / "keep.pt").write_bytes(b"k")
    (root / "checkpoints" / "sub" / "cron").symlink_to(secrets)
    tree = JobRoot(root)
    assert tree.remove_links("checkpoints") == 1
    assert sorted(str(p.relative_to(root)) for p in (root / "checkpoints").rglob("*")) == [
        "checkpoints/keep.pt", "checkpoints/sub"]
    (root / "model2").symlink_to(secrets)
    assert tree.remove_links("model2") == 1 and not os.path.lexists(root / "model2")


def test_pinned_path_names_the_checked_file_even_after_a_swap(world):
    root, secrets = world
    (root / "output" / "failure").write_text("the real reason")
    tree = JobRoot(root)
    with tree.pinned_path("output/failure") as (path, st):
        os.remove(root / "output" / "failure")
        os.symlink(secrets / "airflow-secrets.env", root / "output" / "failure")
        with open(path, "rb") as handle:
            assert handle.read() == b"the real reason" and st.st_size == len(b"the real reason")


def test_paths_outside_the_root_are_a_caller_error(world):
    root, _ = world
    tree = JobRoot(root)
    for rel in ("../secrets/airflow-secrets.env", "/etc/passwd"):
        with pytest.raises(ValueError):
            tree.read_bytes(rel)
    with pytest.raises(ValueError):
        tree.relative(root.parent / "secrets")


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", '{"value": NaN}'])
def test_strict_json_refuses_non_finite_numbers(text):
    with pytest.raises(ValueError):
        loads_strict(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10**400, "1.0", True, None, [1]])
def test_finite_number_refuses_what_is_not_a_finite_number(value):
    with pytest.raises(ValueError, match="loss"):
        finite_number(value, "loss")


@pytest.mark.parametrize("value", [-1, 2**60, 1.5, "3", False, None])
def test_bounded_int_refuses_negative_huge_and_wrong_types(value):
    with pytest.raises(ValueError, match="step"):
        bounded_int(value, "step", low=0, high=2**53)


def test_validators_keep_good_values():
    assert finite_number(3, "x") == 3.0 and bounded_int(4.0, "step") == 4


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_give_to_changes_links_not_their_targets_and_never_a_hard_link_elsewhere(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("root's")
    root = tmp_path / "job"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print()")
    (root / "link").symlink_to(outside)
    os.link(outside, root / "hard")  # the same inode as a file outside the root
    assert JobRoot(root).give_to(4321, 4321) == 4  # job, code, train.py, the link itself
    assert (root / "code" / "train.py").stat().st_uid == 4321 and os.lstat(root / "link").st_uid == 4321
    assert outside.stat().st_uid == 0  # neither through the symbolic link nor through the hard link
    assert JobRoot(root).give_to(4321, 4321) == 0  # a retry changes nothing

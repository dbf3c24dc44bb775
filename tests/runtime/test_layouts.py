import os
from pathlib import Path

import pytest

from training_runtime.layouts import (
    CONTAINER_ROOTS,
    LAYOUT_NAMES,
    create_directories,
    layout_for,
)

EXPECTED = {
    # layout: (code, model, checkpoints) relative to the root
    "ti": ("code", "model", "checkpoints"),
    "sagemaker": ("code", "model", "checkpoints"),
    "pai": ("usercode", "output/model", "output/checkpoints"),
    "modelarts": ("user-job-dir/code", "output/model", "output/checkpoints"),
}


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_layout_paths_follow_the_platform_tables(name, tmp_path):
    layout = layout_for(name, tmp_path)
    code, model, checkpoints = EXPECTED[name]
    assert layout.root == str(tmp_path)
    assert layout.code_dir == str(tmp_path / code)
    assert layout.model_dir == str(tmp_path / model)
    assert layout.checkpoint_dir == str(tmp_path / checkpoints)
    # Shared by every layout.
    assert layout.config_dir == str(tmp_path / "input/config")
    assert layout.data_dir == str(tmp_path / "input/data")
    assert layout.channel_dir("train") == str(tmp_path / "input/data/train")
    assert layout.output_dir == str(tmp_path / "output")
    assert layout.output_data_dir == str(tmp_path / "output/data")
    assert layout.failure_file == str(tmp_path / "output/failure")
    assert layout.success_file == str(tmp_path / "output/success")
    assert layout.config_file("hyperparameters.json") == str(tmp_path / "input/config/hyperparameters.json")
    assert layout.job_dir == os.path.dirname(layout.code_dir)


def test_container_roots_are_the_platform_roots():
    assert layout_for("ti").root == "/opt/ml"
    assert layout_for("sagemaker").root == "/opt/ml"
    assert layout_for("pai").root == "/ml"
    assert layout_for("modelarts").root == "/home/ma-user/modelarts"
    assert set(CONTAINER_ROOTS) == set(LAYOUT_NAMES)


def test_relative_root_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert layout_for("ti", "jobs/a").root == str(tmp_path / "jobs/a")


def test_unknown_layout_names_the_choices():
    with pytest.raises(ValueError, match="unknown layout 'azure'.*ti, sagemaker, pai, modelarts"):
        layout_for("azure", "/tmp/x")


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_create_directories_makes_every_directory_and_channel(name, tmp_path):
    layout = create_directories(layout_for(name, tmp_path / "job"), channels=["train", "test"])
    for path in (
        layout.code_dir, layout.config_dir, layout.data_dir, layout.model_dir,
        layout.checkpoint_dir, layout.output_dir, layout.output_data_dir,
        layout.channel_dir("train"), layout.channel_dir("test"),
    ):
        assert Path(path).is_dir(), path
    # Idempotent: existing content is kept.
    Path(layout.code_dir, "train.py").write_text("x")
    create_directories(layout, channels=["train"])
    assert Path(layout.code_dir, "train.py").read_text() == "x"

"""The engine functions of the stages before the training, on a local store, without Airflow: what each leaves in the
job root and returns, and how it says a stage failed for good."""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from operators.engine import transfers
from operators.engine.errors import StageFailed
from operators.engine.results import Restored, StagedChannels, StagedCode, WrittenConfigs
from operators.lineage.code_digest import code_digest


def test_stage_code_copies_the_code_into_the_job_root_and_returns_what_it_staged(make_context):
    ctx = make_context()
    staged = transfers.stage_code(ctx)
    assert staged == StagedCode(ctx.layout.code_dir, 1, len("print('training')\n"),
                                code_digest(ctx.layout.code_dir).digest)
    assert staged.code_digest.startswith("sha256:")
    assert open(os.path.join(ctx.layout.code_dir, "train.py")).read() == "print('training')\n"
    assert StagedCode.from_dict(json.loads(json.dumps(staged.to_dict()))) == staged


def test_stage_code_of_a_source_that_does_not_exist_fails_for_good(make_context, tmp_path):
    ctx = make_context(source_dir=str(tmp_path / "code"))
    (tmp_path / "code" / "train.py").unlink()
    (tmp_path / "code").rmdir()
    with pytest.raises(StageFailed, match="code"):
        transfers.stage_code(ctx)


def test_a_job_root_another_run_holds_is_not_staged_into(make_context):
    ctx = make_context()
    transfers.stage_code(ctx)
    other = type(ctx)(ctx.job, dag_id="training_job", run_id="r2", settings=ctx.settings)
    with pytest.raises(StageFailed, match=ctx.spec.job_name):
        transfers.stage_code(other)


def test_prefetch_links_each_channel_to_its_cache_entry_and_the_configs_name_its_file(make_context, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.csv").write_text("1,2\n")
    ctx = make_context(inputs={"train": str(data / "rows.csv")})
    transfers.stage_code(ctx)
    channels = transfers.prefetch_data(ctx)
    train = channels.channels["train"]
    assert train.is_file and train.file_name == "rows.csv" and train.uri == str(data / "rows.csv")
    assert open(os.path.join(ctx.layout.channel_dir("train"), "rows.csv")).read() == "1,2\n"
    assert StagedChannels.from_dict(json.loads(json.dumps(channels.to_dict()))) == channels
    # what the run's lineage names: the cache entry's key as the data version, its files and bytes
    assert train.data_version == os.path.basename(os.path.dirname(train.entry)) and len(train.data_version) == 64
    assert (train.files, train.bytes) == (1, len("1,2\n"))

    written = transfers.write_configs(ctx, channels.to_dict())
    assert written == WrittenConfigs(("algo-1",), ctx.layout.config_dir)
    config = json.loads(open(os.path.join(ctx.layout.config_dir, "trainingjobconfig.json")).read())
    assert config["channel_files"] == {"train": "rows.csv"}


def test_the_configs_of_a_kubernetes_job_name_its_pods_without_its_launcher(make_context):
    ctx = make_context(backend="kubernetes", instance_count=2)
    os.makedirs(ctx.layout.root)
    written = transfers.write_configs(ctx)
    assert len(written.hosts) == 2 and all(ctx.spec.job_name in host for host in written.hosts)
    resource = json.loads(open(os.path.join(ctx.layout.config_dir, "resourceconfig.json")).read())
    assert resource["hosts"] == list(written.hosts)


def test_restore_downloads_the_checkpoints_and_extracts_the_model_to_resume_from(make_context, tmp_path):
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    (checkpoints / "step-1.pt").write_text("w")
    model_dir = tmp_path / "earlier" / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "weights.bin").write_text("m")
    archive = tmp_path / "earlier" / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(model_dir / "weights.bin", arcname="weights.bin")
    ctx = make_context(checkpoint_path=str(checkpoints), resume_from=str(archive))
    transfers.stage_code(ctx)
    restored = transfers.restore(ctx)
    assert restored == Restored(1, str(archive))
    assert open(os.path.join(ctx.layout.checkpoint_dir, "step-1.pt")).read() == "w"
    assert open(os.path.join(ctx.layout.channel_dir("model"), "weights.bin")).read() == "m"
    assert Restored.from_dict(json.loads(json.dumps(restored.to_dict()))) == restored


def test_a_model_that_is_no_archive_fails_for_good(make_context, tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_text("not a tar")
    ctx = make_context(resume_from=str(bad))
    transfers.stage_code(ctx)
    with pytest.raises(StageFailed):
        transfers.restore(ctx)

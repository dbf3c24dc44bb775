"""A reproduction's pins enforced by the engine, on a local store, without Airflow: stage_code refuses code whose
digest is not the reproduced run's, prefetch_data a channel whose listing gives another data version before a byte of
it is downloaded (or trains on it, logging the channel, when the spec allows changed data)."""

from __future__ import annotations

import logging
import os

import pytest

from operators.engine import transfers
from operators.engine.errors import StageFailed

PINNED_RUN = "churn-20260202-010203-beef"


def _reproduces(**pins) -> dict:
    return {"job_name": PINNED_RUN, "dag_id": "training_job", "run_id": "manual__1", **pins}


@pytest.fixture
def channel(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.csv").write_text("1,2\n")
    return data


def _first_run(make_context, channel):
    """The run reproduced: what it staged and the data version it prefetched."""
    ctx = make_context(inputs={"train": str(channel) + "/"})
    code = transfers.stage_code(ctx)
    data = transfers.prefetch_data(ctx)
    return code.code_digest, data.channels["train"].data_version


def test_a_reproduction_of_unchanged_code_and_data_stages_both_and_records_the_same_versions(make_context, channel):
    digest, version = _first_run(make_context, channel)
    ctx = make_context(inputs={"train": str(channel) + "/"},
                       reproduces=_reproduces(code_digest=digest, data_versions={"train": version}))
    assert transfers.stage_code(ctx).code_digest == digest
    staged = transfers.prefetch_data(ctx).channels["train"]
    assert staged.data_version == version
    assert open(os.path.join(ctx.layout.channel_dir("train"), "rows.csv")).read() == "1,2\n"


def test_code_changed_since_the_run_is_refused_with_one_line_naming_the_source_and_both_digests(
        make_context, channel, tmp_path):
    digest, version = _first_run(make_context, channel)
    (tmp_path / "code" / "helpers.py").write_text("SEED = 2\n")  # a file added since
    ctx = make_context(inputs={"train": str(channel) + "/"},
                       reproduces=_reproduces(code_digest=digest, data_versions={"train": version}))
    with pytest.raises(StageFailed) as failed:
        transfers.stage_code(ctx)
    line = failed.value.reason
    assert "\n" not in line
    assert str(tmp_path / "code") in line and digest in line and PINNED_RUN in line
    assert "Clone" in line


def test_changed_data_is_refused_naming_the_channel_before_any_byte_of_it_is_downloaded(
        make_context, channel, tmp_path):
    digest, version = _first_run(make_context, channel)
    (channel / "rows.csv").write_text("1,2\n3,4\n")  # one object changed since the run
    ctx = make_context(inputs={"train": str(channel) + "/"},
                       reproduces=_reproduces(code_digest=digest, data_versions={"train": version}))
    transfers.stage_code(ctx)
    cache = ctx.settings.cache_dir
    before = sorted(os.listdir(cache))
    with pytest.raises(StageFailed) as failed:
        transfers.prefetch_data(ctx)
    line = failed.value.reason
    assert line.startswith("channel train: the data at ") and str(channel) in line
    assert f"version {version[:12]} -> " in line and "reproduces.allow_changed_data" in line and "\n" not in line
    assert sorted(os.listdir(cache)) == before  # no new entry, no download under way
    assert not os.path.exists(os.path.join(ctx.layout.channel_dir("train"), "rows.csv"))


def test_allow_changed_data_trains_on_the_new_data_and_logs_the_changed_channel(make_context, channel, caplog):
    digest, version = _first_run(make_context, channel)
    (channel / "rows.csv").write_text("5,6\n")
    ctx = make_context(inputs={"train": str(channel) + "/"},
                       reproduces=_reproduces(code_digest=digest, data_versions={"train": version},
                                              allow_changed_data=True))
    transfers.stage_code(ctx)
    with caplog.at_level(logging.WARNING):
        staged = transfers.prefetch_data(ctx).channels["train"]
    assert staged.data_version != version
    assert open(os.path.join(ctx.layout.channel_dir("train"), "rows.csv")).read() == "5,6\n"
    changed = [r.getMessage() for r in caplog.records if "channel train: the data at" in r.getMessage()]
    assert len(changed) == 1 and "training on the new data" in changed[0]

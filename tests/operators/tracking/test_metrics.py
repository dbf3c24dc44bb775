"""Metric points the script writes itself (output/metrics.jsonl) are the tenant's: a link is not read, and only
finite numbers with sane steps count."""

from __future__ import annotations

import json

from operators.tracking.metrics import MetricCollector


def test_hostile_points_are_dropped(tmp_path):
    out = tmp_path / "output"
    out.mkdir()
    lines = [
        {"name": "loss", "value": 0.5, "step": 1},
        {"name": "loss", "value": "NaN"},
        {"name": "loss", "value": 1e400},
        {"name": "loss", "value": 0.4, "step": -3},
        {"name": "loss", "value": 0.4, "step": 2**70},
        {"name": "loss", "value": True},
        {"name": ["x"], "value": 1.0},
        {"name": "loss", "value": 0.3, "step": 2, "timestamp": "soon"},
        {"name": "acc", "value": 0.9, "step": 2},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\nNaN\n" + '{"name": "loss", "value": NaN}\n'
    (out / "metrics.jsonl").write_text(text)
    collector = MetricCollector()
    collector.read_file(out / "metrics.jsonl", job_root=str(tmp_path))
    assert collector.final() == {"loss": 0.5, "acc": 0.9}
    assert json.dumps(collector.to_json(), allow_nan=False)


def test_a_linked_metrics_file_is_not_read(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"name": "leak", "value": 1.0}) + "\n")
    (tmp_path / "job" / "output").mkdir(parents=True)
    (tmp_path / "job" / "output" / "metrics.jsonl").symlink_to(outside)
    collector = MetricCollector()
    collector.read_file(tmp_path / "job" / "output" / "metrics.jsonl", job_root=str(tmp_path / "job"))
    assert collector.final() == {}


def test_series_read_back_from_a_job_root_keep_only_valid_points():
    collector = MetricCollector()
    collector.load_series({"loss": [{"value": 0.9, "step": 0}, {"value": None}, {"value": 0.5, "step": 1}],
                           "bad": "not a list", "": [{"value": 1.0}]})
    assert [p["value"] for p in collector.series["loss"]] == [0.9, 0.5] and set(collector.series) == {"loss"}


def test_system_samples_are_curves_not_final_metrics():
    collector = MetricCollector()
    collector.add("loss", 0.5, step=1)
    collector.add("system/algo-1/cpu_percent", 180.0, step=1)
    assert collector.final() == {"loss": 0.5}  # the XCom, a search's objective and the list's columns
    assert set(collector.to_json()["series"]) == {"loss", "system/algo-1/cpu_percent"}  # the job page's charts


def test_an_echoed_point_is_a_point_only_where_the_platform_asked_for_the_echo():
    line = '[algo-1] [training-metric] {"name": "loss", "value": 0.5, "step": 3}'
    shared = MetricCollector([{"Name": "loss", "Regex": r"value\": ([0-9.]+)"}])
    assert shared.feed(line) is False  # a shared volume: the file is read, a line like this is the user's output
    assert shared.series["loss"][0]["value"] == 0.5 and shared.series["loss"][0]["step"] == 0

    cluster = MetricCollector([{"Name": "loss", "Regex": r"value\": ([0-9.]+)"}], echoed=True)
    assert cluster.feed(line) is True
    assert cluster.series["loss"][0]["step"] == 3  # the point itself, not the regex's match of it
    assert cluster.feed("loss: [training-metric] 1") is False  # only at the start of a line (after the host)
    assert cluster.feed('[training-metric] {"name": "loss", "value": true}') is True  # consumed, not kept
    assert len(cluster.series["loss"]) == 1

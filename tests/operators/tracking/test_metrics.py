"""Metric points the script writes itself (output/metrics.jsonl) are the tenant's: a link is not read, and only
finite numbers with sane steps count."""

from __future__ import annotations

import json
import logging
import time

import pytest

from operators.jobspec.metric_regex import MAX_LINE_CHARS, MAX_MATCHES_PER_LINE
from operators.tracking.metrics import MatchBudget, MetricCollector


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


# ---- the tenant's expressions run on the worker: linear time, bounded lines, a CPU budget (issue 47) -------------


def test_a_pathological_expression_on_a_long_line_costs_the_worker_well_under_a_second():
    import re2

    # `re` took 16 s for this on a 27-character line, doubling with each character; RE2 is linear in the line.
    collector = MetricCollector([{"Name": f"m{i}", "Regex": r"(?:a+)+(\d)"} for i in range(64)])
    assert all(isinstance(pattern, re2._Regexp) for _name, pattern in collector._patterns)  # the engine is RE2
    started = time.thread_time()
    for _ in range(20):
        assert collector.feed("a" * 1_000_000 + "!") is False
    collector.feed("aaaa7")
    assert time.thread_time() - started < 1.0  # a hang guard: ~10 ms here
    assert collector.final()["m0"] == 7.0


@pytest.mark.parametrize("regex, line, value", [
    (r"loss: ([0-9\.]+)", "epoch 3 loss: 0.25 acc 0.9", 0.25),  # SageMaker's examples
    ("Train_loss=(.*?);", "Train_loss=0.125;Test_loss=0.5;", 0.125),
    (r".*\[[0-9]+\].*#011validation-auc:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*",
     "[12]#011train-auc:0.8#011validation-auc:7.5e-1", 0.75),
    (r"(?i)LOSS=(?P<value>\d+\.\d+)", "loss=1.50", 1.5),
])
def test_the_usual_sagemaker_expressions_still_match(regex, line, value):
    from operators.launch.spec import validate_spec

    spec = validate_spec({"job_name": "j", "source_dir": "s3://b/c/", "output_path": "s3://b/m", "entry_point": "t.py",
                          "metric_definitions": [{"Name": "m", "Regex": regex}]})
    collector = MetricCollector([m.model_dump() for m in spec.metric_definitions])
    collector.feed(line)
    assert collector.final() == {"m": value}


def test_a_line_is_matched_in_its_first_characters_and_a_definition_at_most_a_few_times_a_line():
    collector = MetricCollector([{"Name": "loss", "Regex": r"loss=([0-9]+)"}])
    collector.feed("x" * MAX_LINE_CHARS + "loss=1")  # past the bound: shown, not matched
    assert collector.final() == {}
    collector.feed(" ".join(f"loss={i}" for i in range(100)))
    assert len(collector.series["loss"]) == MAX_MATCHES_PER_LINE


def test_matching_stops_at_its_cpu_budget_and_resumes_under_it(caplog):
    cpu, wall = [0.0], [0.0]

    def spend():  # each reading of the CPU clock: 0.25 s later (a line costs 0.25 s)
        cpu[0] += 0.25
        return cpu[0]

    budget = MatchBudget(share=0.1, grace=1.0, cpu=spend, wall=lambda: wall[0])
    collector = MetricCollector([{"Name": "loss", "Regex": r"loss=([0-9]+)"}], budget=budget)
    with caplog.at_level(logging.WARNING):
        for _ in range(10):
            collector.feed("loss=1")
    assert len(collector.series["loss"]) == 5 and budget.skipped == 5  # 1 s of grace at 0.25 s a line, and the line
    # that crossed it
    assert sum("took more than 10% of a CPU" in r.getMessage() for r in caplog.records) == 1
    wall[0] = 100.0  # time passed: 10 s more of budget
    collector.feed("loss=2")
    assert collector.final() == {"loss": 2.0}

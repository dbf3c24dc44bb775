import json

import pytest

from operators.metrics import MetricCollector
from operators.search import (
    SearchError,
    TrialMonitor,
    asha_rule,
    early_stopping_config,
    format_table,
    generate_trials,
    median_rule,
    parse_search_space,
    read_trial_report,
    select_best,
    trial_job_name,
    trial_status,
)

SPACE = {
    "learning_rate": {"type": "log_uniform", "min": 0.001, "max": 1.0},
    "dropout": {"type": "uniform", "min": 0.1, "max": 0.5},
    "layers": {"type": "int", "min": 2, "max": 8, "step": 2},
    "optimizer": {"type": "choice", "values": ["sgd", "adam"]},
    "batch_size": [32, 64],
}


def test_random_search_is_reproducible_and_stays_in_the_space():
    trials = generate_trials(parse_search_space(SPACE), "random", 10, seed=7)
    assert trials == generate_trials(parse_search_space(SPACE), "random", 10, seed=7)
    assert trials != generate_trials(parse_search_space(SPACE), "random", 10, seed=8)
    assert len(trials) == 10 and all(list(t) == list(SPACE) for t in trials)
    for t in trials:
        assert 0.001 <= t["learning_rate"] <= 1.0 and 0.1 <= t["dropout"] <= 0.5
        assert t["layers"] in (2, 4, 6, 8) and t["optimizer"] in ("sgd", "adam")
    # grid values are covered evenly even by random search; choices are sampled
    assert [t["batch_size"] for t in trials] == [32, 64] * 5
    # log-uniform: about as many samples per decade, not bunched near the top like a uniform draw
    many = generate_trials(parse_search_space({"lr": {"type": "log_uniform", "min": 1e-4, "max": 1}}), "random", 200,
                           seed=1)
    below = sum(t["lr"] < 1e-2 for t in many)
    assert 70 < below < 130


def test_grid_search_enumerates_every_combination_in_order():
    space = parse_search_space({"lr": {"type": "log_uniform", "min": 0.01, "max": 1, "num": 3},
                                "epochs": {"type": "int", "min": 1, "max": 3}, "act": ["relu", "tanh"]})
    trials = generate_trials(space, "grid", 18, seed=0)
    assert len(trials) == 18
    assert trials[:2] == [{"lr": 0.01, "epochs": 1, "act": "relu"}, {"lr": 0.01, "epochs": 1, "act": "tanh"}]
    assert sorted({t["lr"] for t in trials}) == [0.01, 0.1, 1.0]
    assert generate_trials(parse_search_space({"d": {"type": "uniform", "min": 0, "max": 1, "num": 5}}), "grid", 5,
                           0) == [{"d": v} for v in (0.0, 0.25, 0.5, 0.75, 1.0)]


def test_small_discrete_space_runs_out_before_the_budget():
    trials = generate_trials(parse_search_space({"a": {"type": "choice", "values": [1, 2]}, "b": 5}), "random", 8, 3)
    assert sorted(t["a"] for t in trials) == [1, 2] and all(t["b"] == 5 for t in trials)


@pytest.mark.parametrize(
    "space, strategy, budget, field, words",
    [
        ({}, "random", 4, "search_space", "non-empty object"),
        ({"lr": {"type": "normal"}}, "random", 4, "search_space.lr", "must be one of"),
        ({"lr": {"type": "log_uniform", "min": 0, "max": 1}}, "random", 4, "search_space.lr.min", "min > 0"),
        ({"lr": {"type": "uniform", "min": 2, "max": 1}}, "random", 4, "search_space.lr", "greater than max"),
        ({"lr": {"type": "uniform", "max": 1}}, "random", 4, "search_space.lr", "needs \"min\" and \"max\""),
        ({"lr": {"type": "uniform", "min": 0, "max": 1, "steps": 3}}, "random", 4, "search_space.lr", "unknown key"),
        ({"n": {"type": "int", "min": 1.5, "max": 3}}, "random", 4, "search_space.n", "integer min and max"),
        ({"n": {"type": "int", "min": 1, "max": 3, "step": 0}}, "random", 4, "search_space.n.step", ">= 1"),
        ({"a": {"type": "choice", "values": []}}, "random", 4, "search_space.a", "non-empty list"),
        ({"a": [[1, 2]]}, "random", 4, "search_space.a", "JSON scalars"),
        ({"lr": {"type": "uniform", "min": 0, "max": 1}}, "grid", 4, "search_space.lr", "add \"num\""),
        ({"a": [1, 2, 3], "b": [1, 2]}, "grid", 4, "max_trials", "the grid has 6 points but max_trials is 4"),
        ({"a": [1]}, "bayesian", 4, "strategy", "not one of random, grid"),
        ({"a": [1]}, "random", 0, "max_trials", "from 1 to 200"),
    ],
)
def test_bad_search_settings_name_the_field(space, strategy, budget, field, words):
    with pytest.raises(SearchError) as err:
        generate_trials(parse_search_space(space), strategy, budget, 0)
    assert err.value.field == field and f"search field '{field}'" in str(err.value) and words in str(err.value)


def test_trial_job_names():
    assert trial_job_name("hps", 0, 4) == "hps-t01" and trial_job_name("hps", 99, 120) == "hps-t100"
    assert trial_job_name("hps", 11, 120) == "hps-t012"


def test_median_rule():
    kw = {"direction": "minimize", "min_trials": 2, "grace_steps": 1}
    assert median_rule(0.9, 3, [0.5, 0.6, 0.7], **kw) == ("median rule: 0.9 at step 3 is worse than the median 0.6 "
                                                          "of 3 other trial(s) at that step")
    assert median_rule(0.6, 3, [0.5, 0.6, 0.7], **kw) is None  # not worse than the median: goes on
    assert median_rule(0.9, 0, [0.5, 0.6], **kw) is None  # grace period
    assert median_rule(0.9, 3, [0.5], **kw) is None  # too few others at this step
    assert median_rule(0.5, 2, [0.8, 0.9], direction="maximize", min_trials=2, grace_steps=0) is not None


def test_asha_rule_keeps_the_top_fraction_at_rung_steps():
    kw = {"direction": "minimize", "min_trials": 2, "grace_steps": 1, "reduction_factor": 3}
    others = [0.1, 0.2, 0.3, 0.4, 0.5]
    assert asha_rule(0.35, 3, others, **kw).startswith("asha: 0.35 at rung step 3 is not among the best 2 of 6")
    assert asha_rule(0.15, 3, others, **kw) is None
    assert asha_rule(0.9, 2, others, **kw) is None  # rungs are 1, 3, 9, ...: step 2 is not one
    assert asha_rule(0.9, 9, [0.1], **kw) is None  # too few others at the rung


def test_early_stopping_config_checks_its_fields(tmp_path):
    config = early_stopping_config({"early_stopping": "asha", "asha_reduction_factor": 4}, metric="acc",
                                   direction="maximize", report_dir=str(tmp_path))
    assert config["rule"] == "asha" and config["reduction_factor"] == 4 and config["min_trials"] == 2
    with pytest.raises(SearchError, match="'early_stopping_min_trials': must be an integer >= 1"):
        early_stopping_config({"early_stopping": "median", "early_stopping_min_trials": 0}, metric="m",
                              direction="minimize", report_dir=str(tmp_path))
    with pytest.raises(SearchError, match="'early_stopping': 'hyperband' is not one of"):
        early_stopping_config({"early_stopping": "hyperband"}, metric="m", direction="minimize",
                              report_dir=str(tmp_path))


def config(tmp_path, **overrides):
    return {"rule": "median", "metric": "loss", "direction": "minimize", "report_dir": str(tmp_path / "reports"),
            "min_trials": 1, "grace_steps": 1, **overrides}


def test_trial_monitor_stops_a_trial_worse_than_the_others_at_the_same_step(tmp_path):
    first = TrialMonitor(config(tmp_path), "s-t01")
    log = MetricCollector([{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    for line in ("loss=1.0", "acc=0.5 loss=0.5", "loss=0.3"):
        log.feed(line)
        assert first.observe_collector(log) is None  # nobody to compare with
    second = TrialMonitor(config(tmp_path), "s-t02")
    other_log = MetricCollector([{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    other_log.feed("loss=2.0")
    assert second.observe_collector(other_log) is None  # step 0: grace period
    other_log.feed("loss=0.4")
    assert second.observe_collector(other_log) is None  # 0.4 beats 0.5 at step 1
    other_log.feed("loss=0.35")
    reason = second.observe_collector(other_log)
    assert reason == "median rule: 0.35 at step 2 is worse than the median 0.3 of 1 other trial(s) at that step"
    report = read_trial_report(str(tmp_path / "reports"), "s-t02", "loss")
    assert report["points"] == [(0, 2.0), (1, 0.4), (2, 0.35)]
    assert report["stopped"]["others"] == {"s-t01": 0.3} and report["stopped"]["step"] == 2

    # a retried trial starts its report afresh (and is no longer marked stopped)
    TrialMonitor(config(tmp_path), "s-t02")
    assert read_trial_report(str(tmp_path / "reports"), "s-t02", "loss") == {"points": [], "stopped": None}


def test_trial_monitor_reads_points_the_script_writes_itself(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "s-t01.jsonl").write_text("".join(json.dumps({"name": "loss", "step": s, "value": v}) + "\n"
                                                 for s, v in [(5, 0.2), (10, 0.1)]))
    monitor = TrialMonitor(config(tmp_path), "s-t02")
    metrics_file = tmp_path / "metrics.jsonl"
    metrics_file.write_text(json.dumps({"name": "loss", "value": 0.1, "step": 5}) + "\n"
                            + json.dumps({"name": "accuracy", "value": 0.9, "step": 10}) + "\n"
                            + '{"name": "loss", "val')  # a line still being written
    assert monitor.poll_metrics_file(str(metrics_file)) is None
    with metrics_file.open("a") as f:
        f.write('ue": 0.5, "step": 10}\n')
    assert monitor.poll_metrics_file(str(metrics_file)).startswith("median rule: 0.5 at step 10")


def test_summary_rows_best_and_table():
    rows = [
        {"index": 0, "job_name": "s-t01", "params": {"lr": 0.1}, "status": "completed", "value": 0.4,
         "model_uri": "s3://b/s-t01/output/model.tar.gz"},
        {"index": 1, "job_name": "s-t02", "params": {"lr": 0.3}, "status": "stopped_early", "value": 0.1,
         "model_uri": None},
        {"index": 2, "job_name": "s-t03", "params": {"lr": 0.2}, "status": "completed", "value": 0.2,
         "model_uri": "s3://b/s-t03/output/model.tar.gz"},
        {"index": 3, "job_name": "s-t04", "params": {"lr": 0.5}, "status": "failed", "value": None, "model_uri": None},
    ]
    assert select_best(rows, "minimize")["job_name"] == "s-t03"  # a stopped trial has no model to pick
    assert select_best(rows, "maximize")["job_name"] == "s-t01"
    assert select_best([rows[1], rows[3]], "minimize") is None
    table = format_table(rows, "loss", 2).splitlines()
    assert table[0].split() == ["trial", "status", "loss", "lr", "model"]
    assert table[4].split() == ["*", "s-t03", "completed", "0.2", "0.2", "s3://b/s-t03/output/model.tar.gz"]
    assert table[5].split() == ["s-t04", "failed", "-", "0.5", "-"]

    assert trial_status({"succeeded": True}, {"model_uri": "x"}, None) == "completed"
    assert trial_status(None, {"status": "failed"}, {"reason": "median"}) == "stopped_early"
    assert trial_status(None, None, None) == "failed"

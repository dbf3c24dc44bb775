import json

import pytest

from operators.tuning.early_stopping import TrialMonitor, asha_rule, early_stopping_config, median_rule, read_trial_report
from operators.tracking.metrics import MetricCollector
from operators.tuning.search_space import SearchError


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

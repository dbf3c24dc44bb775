from datetime import datetime, timedelta, timezone

import pytest

from operators.stage_names import STAGES
from training_console.jobs import Job, query_items

T0 = datetime(2026, 11, 23, 3, 0, tzinfo=timezone.utc)


def job(run_id, states, *, prefix="", map_index=-1, metrics=None, spec=None, dag_id="training_job", conf=None):
    j = Job(dag_id, run_id, map_index, prefix, run_state="running", run_after=T0, conf=conf or {})
    t = T0
    for stage, state in zip(STAGES, states):
        if state is not None:
            j.tis[stage] = (state, t if state not in ("scheduled", "queued", "upstream_failed") else None,
                            t + timedelta(seconds=10) if state in ("success", "failed", "skipped") else None, 1)
        t += timedelta(seconds=10)
    j.record_result("validate_spec", {"job_name": run_id, "base_job_name": "demo", "backend": "local", "layout": "ti",
                                      "instance_count": 2, "resources": {"cpu": 2}, **(spec or {})})
    j.record_result("launch_training", {"metrics": metrics or {}, "failure_class": "user_error"})
    return j


OK = ["success"] * 8


def test_status_names_the_failed_stage_and_durations_split_staging_training_upload():
    failed = job("a", ["success"] * 5 + ["failed", "success", "upstream_failed"]).summary(T0 + timedelta(hours=1))
    assert (failed["status"], failed["failed_stage"], failed["failure_class"]) == ("failed", "launch_training", "user_error")
    assert failed["failed_stage_label"] == "training"  # the words the pages show: from here, never their own list
    assert failed["durations"] == {"staging": 40.0, "training": 10.0, "upload": 10.0}
    running = job("b", ["success"] * 5 + ["running", None, None]).summary(T0 + timedelta(seconds=75))
    assert running["status"] == "running" and running["durations"]["training"] == 25.0
    assert job("c", OK).status() == ("succeeded", None)
    assert job("d", ["success"] * 5 + ["skipped", "success", "skipped"]).status() == ("stopped", "launch_training")
    assert job("e", ["queued"] + [None] * 7).status() == ("queued", None)
    assert job("f", ["success"] + [None] * 7).status() == ("running", None)  # the next stage not scheduled yet


def test_a_run_that_ended_well_without_publishing_is_succeeded_in_the_views_words():
    skipped_publish = job("g", ["success"] * 6 + ["skipped", "skipped"])
    skipped_publish.run_state = "success"
    assert skipped_publish.status() == ("succeeded", None)  # never Airflow's "success"


def test_trials_of_a_search_are_one_item_with_the_best_marked():
    conf = {"job_name": "s", "objective": "loss", "direction": "minimize"}
    trials = [job(f"s-t0{i}", OK, prefix="trial.", map_index=i, metrics={"loss": loss}, dag_id="hyperparameter_search",
                  conf=conf) for i, loss in enumerate([0.5, 0.2, 0.9])]
    for t in trials:
        t.run_id = "search-run"
    result = query_items([*trials, job("plain", OK, metrics={"loss": 0.1})], now=T0)
    search = next(i for i in result["items"] if i["kind"] == "search")
    assert [t["best"] for t in search["trials"]] == [False, True, False]
    assert search["best_job_name"] == "s-t01" and search["metrics"] == {"loss": 0.2}
    assert result["total"] == 2 and result["metric_names"] == ["loss"]


def test_sort_by_a_metric_puts_jobs_without_it_last_and_filters_combine():
    jobs = [job("m1", OK, metrics={"acc": 0.7}), job("m2", OK, metrics={"acc": 0.9}), job("m3", OK),
            job("f1", ["failed"] + ["upstream_failed"] * 7)]
    names = lambda r: [i["job_name"] for i in r["items"]]  # noqa: E731
    assert names(query_items(jobs, sort="metric:acc", descending=True)) == ["m2", "m1", "m3", "f1"]
    assert names(query_items(jobs, sort="metric:acc", descending=False))[:2] == ["m1", "m2"]
    assert names(query_items(jobs, status="failed")) == ["f1"]
    assert names(query_items(jobs, q="M3")) == ["m3"]
    page = query_items(jobs, sort="job_name", descending=False, offset=1, limit=2)
    assert page["total"] == 4 and names(page) == ["m1", "m2"]


def test_a_thousand_jobs_sorted_by_a_metric_page_in_order():
    # Speed is measured in bench/bench_console.py, not here: a timed unit test fails on a loaded CI machine.
    jobs = [job(f"j{i:04d}", OK, metrics={"loss": (i * 7919 % 1000) / 1000}) for i in range(1000)]
    first = query_items(jobs, sort="metric:loss", descending=False, limit=50)
    third = query_items(jobs, sort="metric:loss", descending=False, offset=100, limit=50)
    assert first["total"] == 1000 and len(first["items"]) == 50
    assert [i["metrics"]["loss"] for i in first["items"]] == [n / 1000 for n in range(50)]
    assert [i["metrics"]["loss"] for i in third["items"]] == [n / 1000 for n in range(100, 150)]


def test_a_job_stopped_from_the_view_is_stopped_with_who_and_when_not_a_platform_error():
    note = "Stopped by alice at 2026-11-23 03:01:00 UTC"
    stopped = job("st", ["success"] * 5 + ["failed", "success", "upstream_failed"])
    stopped.record_result("launch_training", {"metrics": {}, "failure_class": "platform_error"})
    stopped.launch_note = note
    row = stopped.summary(T0 + timedelta(hours=1))
    assert (row["status"], row["failure_class"], row["stopped_by"]) == ("stopped", None, note)
    # a whole-run job stopped by the SDK (the run's note) is stopped too; a trial only by its own note
    by_sdk = job("sdk", ["success"] * 5 + ["failed", "success", "upstream_failed"])
    by_sdk.run_note = "Stopped by bob at 2026-11-23 03:02:00 UTC (training_sdk)"
    trial = job("t", ["success"] * 5 + ["failed", "success", "upstream_failed"], prefix="trial.", map_index=0)
    trial.run_note = by_sdk.run_note
    assert by_sdk.status()[0] == "stopped" and trial.status()[0] == "failed"
    # still winding down: running until its stages end
    stopping = job("w", ["success"] * 5 + ["running", None, None])
    stopping.launch_note = note
    assert stopping.status()[0] == "running"
    names = lambda r: [i["job_name"] for i in r["items"]]  # noqa: E731
    assert names(query_items([stopped, by_sdk, job("ok", OK)], status="stopped")) == ["st", "sdk"]
    assert names(query_items([stopped, by_sdk, job("ok", OK)], status="failed")) == []


def test_the_reason_of_a_failed_stage_is_the_first_failed_stages():
    refused = job("r", ["failed"] + ["upstream_failed"] * 7)
    refused.reasons["validate_spec"] = "invalid job spec: source_dir: /x is outside the local roots"
    assert refused.stage_reason() == "invalid job spec: source_dir: /x is outside the local roots"
    assert job("ok", OK).stage_reason() is None


def test_a_search_started_without_a_job_name_is_listed_under_its_trials_name_not_the_run_id():
    trials = [job(f"tune-20261123-030000-ab12-t0{i + 1}", OK, prefix="trial.", map_index=i, dag_id="hyperparameter_search",
                  conf={"objective": "loss"}) for i in range(2)]
    for t in trials:
        t.run_id = "manual__2026-11-23T03:00:00+00:00"
    search = query_items(trials, now=T0)["items"][0]
    assert search["job_name"] == "tune-20261123-030000-ab12"
    assert [t["job_name"] for t in search["trials"]] == ["tune-20261123-030000-ab12-t01", "tune-20261123-030000-ab12-t02"]


def test_a_search_whose_trials_were_all_stopped_is_stopped():
    trials = [job(f"s-t0{i + 1}", ["success"] * 5 + ["failed", "success", "upstream_failed"], prefix="trial.",
                  map_index=i, dag_id="hyperparameter_search", conf={"objective": "loss"}) for i in range(2)]
    for t in trials:
        t.run_id, t.launch_note = "search-run", "Stopped by alice at 2026-11-23 03:05:00 UTC"
    assert query_items(trials, now=T0)["items"][0]["status"] == "stopped"


# ---- the list's filters (issue 27): tag, date range, metric range; hyperparameter and tag names for its columns ----


def test_tag_date_and_metric_filters_combine_server_side():
    from training_console.list_filters import parse_filters

    a = job("a", OK, metrics={"accuracy": 0.95}, spec={"tags": {"team": "churn", "baseline": ""}})
    b = job("b", OK, metrics={"accuracy": 0.80}, spec={"tags": {"team": "churn"}})
    c = job("c", OK, metrics={"accuracy": 0.99}, spec={"tags": {"team": "fraud"}})
    c.run_after = T0 + timedelta(days=2)
    jobs = [a, b, c]
    names = lambda **kw: sorted(i["job_name"] for i in query_items(jobs, filters=parse_filters(**kw))["items"])  # noqa: E731
    assert names(tags=["team:churn"]) == ["a", "b"]
    assert names(tags=["baseline"]) == ["a"]
    assert names(metrics=["accuracy>=0.9"]) == ["a", "c"]
    assert names(metrics=["accuracy >= 0.9", "accuracy<0.99"]) == ["a"]
    assert names(created_to=T0.date().isoformat()) == ["a", "b"]  # the day given is included whole
    assert names(created_from=(T0 + timedelta(days=1)).date().isoformat()) == ["c"]
    assert names(tags=["team:churn"], metrics=["accuracy>0.9"]) == ["a"]
    assert names(metrics=["loss<1"]) == []  # a job without the metric is not in range


def test_the_list_names_the_hyperparameters_and_tags_its_columns_and_filters_offer():
    result = query_items([job("a", OK, spec={"hyperparameters": {"lr": 0.1, "epochs": 3}, "tags": {"team": "x"}}),
                          job("b", OK, spec={"hyperparameters": {"dropout": 0.5}})], now=T0)
    assert result["hyperparameter_names"] == ["dropout", "epochs", "lr"] and result["tag_names"] == ["team"]
    row = next(i for i in result["items"] if i["job_name"] == "a")
    assert row["hyperparameters"] == {"lr": 0.1, "epochs": 3} and row["tags"] == {"team": "x"}


def test_a_search_matches_a_metric_range_when_one_of_its_trials_does():
    from training_console.list_filters import parse_filters

    conf = {"job_name": "s", "objective": "loss"}
    trials = [job(f"s-t0{i}", OK, prefix="trial.", map_index=i, metrics={"loss": loss}, conf=conf,
                  spec={"hyperparameters": {"lr": lr}}) for i, (loss, lr) in enumerate([(0.5, 0.1), (0.2, 0.01)])]
    for t in trials:
        t.run_id = "search-run"
    result = query_items(trials, filters=parse_filters(metrics=["loss<=0.2"]), now=T0)
    assert result["total"] == 1 and [t["hyperparameters"] for t in result["items"][0]["trials"]] == [
        {"lr": 0.1}, {"lr": 0.01}]
    assert query_items(trials, filters=parse_filters(metrics=["loss<0.1"]), now=T0)["total"] == 0


@pytest.mark.parametrize("kwargs, words", [
    ({"metrics": ["accuracy"]}, "metric filter 'accuracy' is not a range; write <metric><op><number>"),
    ({"metrics": ["accuracy>=high"]}, "is not a range"),
    ({"created_from": "last tuesday"}, "from date 'last tuesday' is not a date; write YYYY-MM-DD"),
    ({"tags": [":x"]}, "names no tag"),
])
def test_a_filter_that_cannot_be_read_is_one_line_saying_what_to_write(kwargs, words):
    from training_console.list_filters import FilterError, parse_filters

    with pytest.raises(FilterError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_filters(**kwargs)


def test_an_elastic_job_says_which_hosts_were_started_again():
    elastic = job("elastic-run", OK)
    elastic.record_result("launch_training", {"metrics": {}, "restarts": {"elastic-run-1": 1}})
    assert elastic.summary(T0)["restarts"] == {"elastic-run-1": 1}
    assert job("static-run", OK).summary(T0)["restarts"] == {}  # nothing to say

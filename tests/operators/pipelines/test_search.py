from operators.pipelines.search import format_table, select_best, trial_status


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


def test_every_search_param_names_draft_7():
    """The search's own Params (objective, strategy, early stopping...) are checked at every resolve like the job's:
    they name draft 7, whose meta-schema check is the cheap one (bench/README.md, "No-op job")."""
    from jsonschema import Draft7Validator
    from jsonschema.validators import validator_for

    from operators.pipelines.search import search_params

    for name, param in search_params().items():
        assert validator_for(param.schema) is Draft7Validator, name

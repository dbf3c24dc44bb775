import pytest

from operators.tuning.search_space import SearchError, generate_trials, parse_search_space, trial_job_name

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

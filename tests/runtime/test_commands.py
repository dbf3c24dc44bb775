"""$PAI_USER_ARGS / $SM_USER_ARGS in a command: each hyperparameter arrives as exactly one
argument, and nothing in a value is executed."""

import json
from pathlib import Path

import pytest

from training_runtime import commands
from training_runtime import hyperparameters as hps

NASTY = {
    "epochs": "10",
    "note": "a b; touch pwned-semicolon",
    "sub": "$(touch pwned-subst)",
    "tick": "`touch pwned-backtick`",
    "quote": "it's \"quoted\"",
    "glob": "*",
    "empty": "",
    "newline": "line1\nline2",
}
PAI_EXPECTED = [
    "--epochs", "10", "--note", "a b; touch pwned-semicolon", "--sub", "$(touch pwned-subst)",
    "--tick", "`touch pwned-backtick`", "--quote", "it's \"quoted\"", "--glob", "*", "--empty",
    "--newline", "line1\nline2",
]


def _nothing_executed(job):
    leftovers = [p.name for p in Path(job.layout.code_dir).iterdir() if p.name.startswith("pwned")]
    leftovers += [p.name for p in Path(job.root).iterdir() if p.name.startswith("pwned")]
    assert leftovers == []


@pytest.mark.parametrize("reference", ["$PAI_USER_ARGS", "${PAI_USER_ARGS}"])
def test_pai_user_args_arrive_one_argument_each(make_job, reference):
    job = make_job(layout="pai", entry_point=None, command="python train.py %s" % reference, hyperparameters=NASTY)
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert job.seen()["argv"] == PAI_EXPECTED
    _nothing_executed(job)


def test_sm_user_args_in_a_command_are_sagemakers_sorted_form(make_job):
    job = make_job(layout="sagemaker", entry_point=None, command="python train.py $SM_USER_ARGS && true",
                   hyperparameters=NASTY)
    assert job.run().returncode == 0
    seen = job.seen()
    assert seen["argv"] == json.loads(seen["env"]["SM_USER_ARGS"])
    assert seen["argv"][:4] == ["--empty", "", "--epochs", "10"]
    _nothing_executed(job)


def test_both_in_one_command_and_the_command_keeps_no_positional_arguments(make_job):
    script = "import json, os, sys; json.dump(sys.argv[1:], open(os.environ['TM_OUTPUT_DATA_DIR'] + '/' + sys.argv[1], 'w'))"
    job = make_job(layout="pai", entry_point=None, hyperparameters={"a": "1 2"},
                   code={"rec.py": script, "train.py": "import sys\nsys.exit(0)\n"},
                   command='python rec.py pai $PAI_USER_ARGS; python rec.py sm ${SM_USER_ARGS}; '
                           'python rec.py rest "$@" "$#"')
    assert job.run().returncode == 0, job.failure
    out = Path(job.layout.output_data_dir)
    assert json.loads((out / "pai").read_text()) == ["pai", "--a", "1 2"]
    assert json.loads((out / "sm").read_text()) == ["sm", "-a", "1 2"]
    assert json.loads((out / "rest").read_text()) == ["rest", "0"]  # "$@" is empty, as before


def test_eval_of_the_quoted_variable_gives_the_same_arguments(make_job):
    job = make_job(layout="pai", entry_point=None, command='eval "python train.py $PAI_USER_ARGS"',
                   hyperparameters=NASTY)
    assert job.run().returncode == 0
    assert job.seen()["argv"] == PAI_EXPECTED
    _nothing_executed(job)


def test_a_command_without_the_variables_runs_unchanged():
    assert commands.argv("python train.py --x 1", [hps.decode("a", "1")]) == ["bash", "-c", "python train.py --x 1"]


@pytest.mark.parametrize(
    "command, rewritten",
    [
        ("python t.py $PAI_USER_ARGS", 'python t.py "${_TRAINING_PAI_USER_ARGS[@]}"'),
        ("python t.py ${SM_USER_ARGS}|tee log", 'python t.py "${_TRAINING_SM_USER_ARGS[@]}"|tee log'),
        # Inside quotes, part of a longer word, another variable, escaped: left alone.
        ('python t.py "$PAI_USER_ARGS"', None),
        ("echo '$PAI_USER_ARGS'", None),
        ("python t.py --args=$PAI_USER_ARGS", None),
        ("echo $PAI_USER_ARGS_X", None),
        ("echo \\$PAI_USER_ARGS", None),
    ],
)
def test_rewrite_only_touches_unquoted_words(command, rewritten):
    result, used = commands.rewrite(command)
    assert result == (rewritten or command)
    assert bool(used) == (rewritten is not None)


def test_pai_user_args_variable_splits_back_into_the_arguments(make_job):
    import shlex

    job = make_job(layout="pai", hyperparameters=NASTY)
    assert job.run().returncode == 0
    assert shlex.split(job.seen()["env"]["PAI_USER_ARGS"]) == PAI_EXPECTED


def test_the_log_shows_a_pai_command_as_written_with_each_hyperparameter_once(make_job):
    """The task log said `bash -c '_TRAINING_PAI_USER_ARGS=...' bash --epochs 10 --lr 0.1 --epochs 10 --lr 0.1`:
    the platform's rewrite, and every hyperparameter twice (the SageMaker form passed too, though unused)."""
    job = make_job(layout="pai", entry_point=None, command="python train.py $PAI_USER_ARGS",
                   hyperparameters={"epochs": "10", "note": "a b"})
    result = job.run()
    assert result.returncode == 0, result.stderr
    running = [line for line in result.stderr.splitlines() if "running command" in line]
    assert len(running) == 1 and running[0].endswith(": python train.py --epochs 10 --note 'a b'"), result.stderr
    assert job.seen()["argv"] == ["--epochs", "10", "--note", "a b"]
    argv = commands.argv("python train.py $PAI_USER_ARGS", [hps.decode("epochs", "10")])
    assert argv[3:] == ["bash", "--epochs", "10"]  # the arguments reach bash once

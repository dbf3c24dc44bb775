"""How the user code is started: argv, shells, working directory, interpreter."""

import json
import sys
from pathlib import Path

import pytest

HOSTILE = "a b; touch PWNED $(touch PWNED2) `touch PWNED3`"


def _no_pwned_files(job):
    return not any(p.name.startswith("PWNED") for p in job.root.rglob("*"))


def test_shell_metacharacters_in_a_value_arrive_as_one_argument_and_run_nothing(make_job):
    job = make_job(hyperparameters={"name": HOSTILE, "epochs": 1})
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert job.seen()["argv"] == ["--name", HOSTILE, "--epochs", "1"]
    assert _no_pwned_files(job)


def test_shell_metacharacters_in_a_value_are_quoted_in_pai_user_args(make_job):
    # `eval` re-parses PAI_USER_ARGS: the quoting must hold even then.
    job = make_job(entry_point=None, command='eval "python train.py $PAI_USER_ARGS"',
                   hyperparameters={"name": HOSTILE, "epochs": 1})
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert job.seen()["argv"] == ["--name", HOSTILE, "--epochs", "1"]
    assert _no_pwned_files(job)


def test_plain_expansion_of_pai_user_args_runs_nothing(make_job):
    job = make_job(entry_point=None, command="python train.py $PAI_USER_ARGS", hyperparameters={"name": HOSTILE})
    assert job.run().returncode == 0
    assert _no_pwned_files(job)


def test_empty_value_gives_a_bare_flag(make_job):
    script = (
        "import argparse, json, os\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--use-amp', action='store_true')\n"
        "p.add_argument('--epochs', type=int)\n"
        "a = p.parse_args()\n"
        "open(os.path.join(os.environ['TM_MODEL_DIR'], 'args.json'), 'w').write(json.dumps([a.use_amp, a.epochs]))\n"
    )
    job = make_job(hyperparameters={"use-amp": "", "epochs": 4}, code={"train.py": script})
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert json.loads(Path(job.layout.model_dir, "args.json").read_text()) == [True, 4]


def test_shell_script_entry_point_runs_with_bash_in_the_code_dir(make_job):
    script = 'printf "%s\\n" "$PWD" "$#" "$@" > "$TM_OUTPUT_DATA_DIR/sh.txt"\n'
    job = make_job(entry_point="run.sh", code={"run.sh": script}, hyperparameters={"lr": "0.1", "name": "x y"})
    # Not executable on purpose: bash runs it.
    result = job.run()
    assert result.returncode == 0, result.stderr
    lines = Path(job.layout.output_data_dir, "sh.txt").read_text().splitlines()
    assert lines == [job.layout.code_dir, "4", "--lr", "0.1", "--name", "x y"]


def test_executable_entry_point_without_extension_runs_directly(make_job):
    script = "#!/bin/sh\necho \"$@\" > \"$TM_OUTPUT_DATA_DIR/direct.txt\"\n"
    job = make_job(entry_point="bin/train", code={}, hyperparameters={"x": "1"})
    job.write_code("bin/train", script, mode=0o755)
    assert job.run().returncode == 0
    assert Path(job.layout.output_data_dir, "direct.txt").read_text() == "--x 1\n"


def test_entry_point_in_a_subdirectory(make_job, record_script):
    job = make_job(entry_point="src/train.py", code={"src/train.py": record_script}, hyperparameters={"a": 1})
    assert job.run().returncode == 0
    seen = job.seen()
    assert seen["cwd"] == job.layout.code_dir
    assert seen["argv"] == ["--a", "1"]


def test_command_runs_through_a_shell_without_implicit_arguments(make_job):
    job = make_job(
        entry_point=None,
        command='python train.py && echo "shell ran in $PWD" > "$TM_OUTPUT_DATA_DIR/shell.txt"',
        hyperparameters={"epochs": 3},
    )
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert job.seen()["argv"] == []
    assert Path(job.layout.output_data_dir, "shell.txt").read_text() == "shell ran in %s\n" % job.layout.code_dir


def test_python_in_a_command_is_the_jobs_python(make_job):
    job = make_job(entry_point=None, command="python train.py")
    assert job.run().returncode == 0
    # No requirements.txt: the job's Python is the interpreter running `train`.
    # (directories compared with links resolved: .venv may be a link to a shared one)
    assert Path(job.seen()["executable"]).parent.resolve() == Path(sys.executable).parent.resolve()


@pytest.mark.parametrize(
    "job_config, hyperparameters, expected",
    [
        ({"command": "python b.py", "entry_point": "a.py"}, {"ti_program": "c.py"}, "b"),
        ({"entry_point": "a.py"}, {"ti_program": "c.py", "sagemaker_program": '"d.py"'}, "a"),
        ({"entry_point": None}, {"ti_program": "c.py", "sagemaker_program": '"d.py"'}, "c"),
        ({"entry_point": None, "layout": "sagemaker"}, {"sagemaker_program": '"d.py"'}, "d"),
    ],
)
def test_entry_point_precedence(make_job, job_config, hyperparameters, expected):
    marker = "import os; open(os.path.join(os.environ['TM_OUTPUT_DATA_DIR'], 'ran'), 'w').write(%r)\n"
    code = {name + ".py": marker % name for name in "abcd"}
    entry_point = job_config.pop("entry_point", None)
    job = make_job(code=code, entry_point=entry_point, hyperparameters=hyperparameters, **job_config)
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert Path(job.layout.output_data_dir, "ran").read_text() == expected


@pytest.mark.parametrize(
    "layout, expected_argv",
    [
        # Each layout reserves what its original runtime reserves, and passes the rest.
        ("ti", ["--sagemaker_region", "x", "--epochs", "1"]),
        ("sagemaker", ["--epochs", "1", "--ti_enable_gpu_exclusive", "True"]),
        ("pai", ["--epochs", "1"]),
        ("modelarts", ["--epochs", "1"]),
    ],
)
def test_reserved_keys_are_not_passed_to_the_script(make_job, layout, expected_argv):
    job = make_job(layout=layout,
                   hyperparameters={"ti_enable_gpu_exclusive": "true", "sagemaker_region": '"x"', "epochs": 1})
    assert job.run().returncode == 0
    seen = job.seen()
    argv = [a for a in seen["argv"] if not a.startswith(("--data_url=", "--train_url="))]
    assert argv == expected_argv
    if layout in ("pai", "modelarts"):
        assert json.loads(seen["env"]["PAI_HPS"]) == {"epochs": 1}
        assert "PAI_HPS_TI_ENABLE_GPU_EXCLUSIVE" not in seen["env"]


@pytest.mark.parametrize(
    "layout, expected_argv",
    [
        # PAI and ModelArts: the string exactly as written in hyperparameters.json.
        ("pai", ["--lr", "1e-3", "--flag", "true", "--layers", "[64, 32]", "--opt", '"adam"']),
        # ti-containers: str() of the JSON-decoded value.
        ("ti", ["--lr", "0.001", "--flag", "True", "--layers", "[64, 32]", "--opt", "adam"]),
        # sagemaker-training: the same, sorted by name.
        ("sagemaker", ["--flag", "True", "--layers", "[64, 32]", "--lr", "0.001", "--opt", "adam"]),
    ],
)
def test_values_reach_the_script_as_the_original_runtime_passes_them(make_job, layout, expected_argv):
    job = make_job(layout=layout, hyperparameters={"lr": "1e-3", "flag": "true", "layers": "[64, 32]",
                                                   "opt": '"adam"'})
    assert job.run().returncode == 0
    seen = job.seen()
    assert seen["argv"] == expected_argv
    assert json.loads(seen["env"]["TM_HPS"]) == {"lr": 0.001, "flag": True, "layers": [64, 32], "opt": "adam"}


def test_command_without_any_code(make_job):
    # An image with the code baked in: no code directory at all.
    job = make_job(entry_point=None, command='echo "$PWD" > "$TM_OUTPUT_DATA_DIR/pwd.txt"', code={})
    Path(job.layout.code_dir).rmdir()
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert Path(job.layout.output_data_dir, "pwd.txt").read_text() == job.layout.code_dir + "\n"


def test_too_large_hyperparameters_are_refused_as_a_user_error(make_job):
    job = make_job(hyperparameters={"blob": "x" * 200_000})
    result = job.run()
    assert result.returncode == 2, result.stderr
    assert "too large to pass to a process" in job.failure

"""Exit codes: user errors (1-3) told apart from platform errors (4)."""

from pathlib import Path


def test_success_is_exit_code_0(make_job):
    job = make_job()
    result = job.run()
    assert result.returncode == 0, result.stderr
    assert "[train] training succeeded" in result.stderr


def test_user_code_failure_is_exit_code_1(make_job):
    job = make_job(code={"train.py": "raise SystemExit(7)\n"})
    assert job.run().returncode == 1
    assert "exit code 7" in job.failure


def test_invalid_job_is_exit_code_2(make_job):
    job = make_job(entry_point="nope.py")
    assert job.run().returncode == 2


def test_platform_problem_is_exit_code_4(make_job, tmp_path):
    # The platform's pip cache setting points at a file: not the user's fault, retryable.
    not_a_directory = tmp_path / "cache-file"
    not_a_directory.write_text("")
    job = make_job(code={"train.py": "", "requirements.txt": "pytest\n"})
    result = job.run(env={"TRAINING_PIP_CACHE": str(not_a_directory)})
    assert result.returncode == 4, result.stderr
    assert "internal error of the training runtime" in job.failure
    assert "may be retried" in job.failure
    assert result.stderr.count("[train] ERROR:") >= 1


def test_log_lines_have_the_train_prefix(make_job):
    job = make_job(code={"train.py": "print('hello from user code')\n"})
    result = job.run()
    assert result.stdout == "hello from user code\n"  # the user's own output is not prefixed
    runtime_lines = [line for line in result.stderr.splitlines() if line]
    assert runtime_lines and all(line.startswith("[train] ") for line in runtime_lines)
    assert any("running entry point train.py" in line for line in runtime_lines)
    assert Path(job.layout.success_file).exists()

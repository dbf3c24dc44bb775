"""One run per job_name: the first run claims the job root, its retries pass, any other run is refused."""

import threading

import pytest

from operators.state.lease import JobNameTaken, claim


def test_the_first_run_claims_and_its_retries_pass(tmp_path):
    root = str(tmp_path / "state" / "j")
    assert claim(root, "j", "training_job", "run-1") is True
    assert claim(root, "j", "training_job", "run-1") is False  # a retry of the same run: reattaches


def test_another_run_is_refused_naming_the_job_and_the_holder(tmp_path):
    root = str(tmp_path / "j")
    claim(root, "j", "training_job", "run-1")
    with pytest.raises(JobNameTaken, match=r"^job j belongs to run run-1 of DAG training_job \(since .*another job_name"):
        claim(root, "j", "training_job", "run-2")
    with pytest.raises(JobNameTaken):
        claim(root, "j", "other_dag", "run-1")  # same run id in another DAG is another run


def test_racing_runs_cannot_both_win(tmp_path):
    root = str(tmp_path / "j")
    won, lost = [], []
    barrier = threading.Barrier(8)

    def race(i):
        barrier.wait()
        try:
            claim(root, "j", "d", f"run-{i}")
            won.append(i)
        except JobNameTaken:
            lost.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7


def test_the_claim_is_kept_outside_the_job_root(tmp_path):
    # The job root is the tenant's: a claim there could be removed by the job's code and taken by another run.
    state, job_root = tmp_path / "state" / "j", tmp_path / "jobs" / "j"
    job_root.mkdir(parents=True)
    claim(str(state), "j", "training_job", "run-1")
    assert list(job_root.iterdir()) == [] and (state / "owner.json").is_file()
    assert oct(state.stat().st_mode & 0o777) == "0o700"

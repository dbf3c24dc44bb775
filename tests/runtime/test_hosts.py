"""The wait for the hosts of a multi-host job to resolve before the user code starts."""

import logging
import os
import socket

import pytest

from training_runtime import hosts
from training_runtime.errors import PLATFORM_ERROR, InvalidJobError, PlatformError, failure_class


class _Clock:
    """Time that passes only when the code under test sleeps (no real waiting)."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _resolver_where(clock, appears_at):
    """A resolver in which each name exists from `appears_at[name]` seconds on (a
    container or pod whose DNS record shows up late); records every look-up."""
    calls = []

    def resolve(name, port):
        calls.append((name, clock.now - 1000.0))
        if clock.now - 1000.0 < appears_at.get(name, 0):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]

    resolve.calls = calls
    return resolve


def test_waits_until_a_late_host_resolves_and_shows_progress(caplog):
    clock = _Clock()
    resolve = _resolver_where(clock, {"algo-2": 23.0})
    with caplog.at_level(logging.INFO, logger="training_runtime"):
        hosts.wait_for_hosts(["algo-1", "algo-2"], 120, resolve=resolve, clock=clock, sleep=clock.sleep)

    assert 23.0 <= clock.now - 1000.0 < 25.0  # returned as soon as it resolved
    assert [name for name, _ in resolve.calls].count("algo-1") == 1  # a resolved host is not asked again
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].startswith("waiting up to 120 s for the job's hosts to resolve: algo-2")
    progress = [m for m in messages if m.startswith("still waiting for algo-2")]
    assert len(progress) == 2  # every 10 s, not every retry
    assert messages[-1].startswith("all 2 hosts resolve (after 2")


def test_a_host_that_never_resolves_is_a_platform_error_naming_it():
    clock = _Clock()
    resolve = _resolver_where(clock, {"algo-3": float("inf")})
    with pytest.raises(PlatformError) as raised:
        hosts.wait_for_hosts(["algo-1", "algo-2", "algo-3"], 30, resolve=resolve, clock=clock, sleep=clock.sleep)

    assert 30.0 <= clock.now - 1000.0 < 31.5
    message = str(raised.value)
    assert message.startswith("host algo-3 did not resolve within 30 s (algo-3: Name or service not known)")
    assert "algo-1" not in message and "algo-2" not in message
    assert raised.value.exit_code == PLATFORM_ERROR and failure_class(PLATFORM_ERROR) == "platform_error"


def test_all_resolving_at_once_logs_nothing(caplog):
    clock = _Clock()
    with caplog.at_level(logging.INFO, logger="training_runtime"):
        hosts.wait_for_hosts(["a", "b"], 120, resolve=_resolver_where(clock, {}), clock=clock, sleep=clock.sleep)
    assert clock.now == 1000.0 and not caplog.records


def test_zero_turns_the_wait_off():
    def resolve(name, port):
        raise AssertionError("no look-up expected")

    hosts.wait_for_hosts(["algo-1", "algo-2"], 0, resolve=resolve)


@pytest.mark.parametrize(
    "cli, env, expected",
    [(None, {}, 120.0), ("5", {}, 5.0), (None, {"TRAINING_HOST_WAIT_SECONDS": "7.5"}, 7.5),
     ("3", {"TRAINING_HOST_WAIT_SECONDS": "7"}, 3.0), ("0", {}, 0.0)],
)
def test_bound_from_flag_then_environment_then_default(cli, env, expected):
    assert hosts.wait_seconds(cli, env) == expected


@pytest.mark.parametrize("bad", ["-1", "soon", "nan", "inf"])
def test_a_bad_bound_is_refused(bad):
    with pytest.raises(InvalidJobError, match="TRAINING_HOST_WAIT_SECONDS is '%s': give the number of seconds" % bad):
        hosts.wait_seconds(None, {"TRAINING_HOST_WAIT_SECONDS": bad})


# --- the real thing: `train` as a process, the system's resolver


def test_train_fails_retryably_naming_a_host_that_never_resolves(make_job):
    # ".invalid" never resolves (RFC 2606); host 1 is an address, which always does.
    job = make_job(hosts=["algo-1", "algo-2"], host_addresses={"algo-1": "127.0.0.1", "algo-2": "algo-2.invalid"})
    result = job.run("--host-wait", "2", timeout=60)

    assert result.returncode == PLATFORM_ERROR, result.stderr
    assert "[train] waiting up to 2 s for the job's hosts to resolve: algo-2.invalid" in result.stderr
    assert "host algo-2.invalid did not resolve within 2 s" in job.failure
    assert "may be retried" in job.failure
    assert not job.succeeded
    assert not any(name.startswith("seen-") for name in os.listdir(job.layout.output_data_dir))  # never started


def test_train_runs_once_every_host_resolves(make_job):
    job = make_job(hosts=["algo-1", "algo-2"], host_addresses={"algo-1": "127.0.0.1", "algo-2": "localhost"})
    result = job.run(env={"TRAINING_HOST_WAIT_SECONDS": "5"})
    assert result.returncode == 0, result.stderr
    assert "waiting up to" not in result.stderr
    assert job.seen()["argv"] == []


def test_train_refuses_a_bad_bound_before_anything_runs(make_job):
    job = make_job(hosts=["algo-1", "algo-2"])
    result = job.run(env={"TRAINING_HOST_WAIT_SECONDS": "two minutes"})
    assert result.returncode == 2
    assert "TRAINING_HOST_WAIT_SECONDS is 'two minutes'" in job.failure

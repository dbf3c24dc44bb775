"""Waiting until every host of a multi-host job resolves, before the user code starts.

The hosts of a job start at different times: a Docker container, a pod and
its DNS record in a headless Service appear seconds apart, so host 0 may look
up host 1 before its name exists (``socket.gaierror: Name or service not
known``), and the job would fail as a user error. ``train`` therefore waits,
bounded, until ``socket.getaddrinfo`` answers for every host (its address from
``host_addresses`` when given, else its name), logging progress, and fails as
a platform error (retryable, exit code 4) naming the hosts that never resolved.

The bound: ``--host-wait SECONDS`` > ``$TRAINING_HOST_WAIT_SECONDS`` >
:data:`DEFAULT_WAIT_SECONDS`; ``0`` turns the wait off. A single-host job
never waits.
"""

import logging
import socket
import time

from training_runtime.errors import InvalidJobError, PlatformError

log = logging.getLogger(__name__)

DEFAULT_WAIT_SECONDS = 120.0
WAIT_ENV = "TRAINING_HOST_WAIT_SECONDS"
#: Seconds between two rounds of look-ups, and between two progress lines.
RETRY_SECONDS = 1.0
PROGRESS_SECONDS = 10.0


def wait_seconds(cli_value=None, environ=None):
    """The bound in seconds from ``--host-wait`` or the environment (exit 2 if bad)."""
    environ = environ or {}
    for source, value in (("--host-wait", cli_value), (WAIT_ENV, environ.get(WAIT_ENV))):
        if value is None or str(value).strip() == "":
            continue
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0 or seconds == float("inf"):
            raise InvalidJobError(
                "%s is %r: give the number of seconds to wait for the job's hosts to resolve "
                "(0 turns the wait off)" % (source, value)
            )
        return seconds
    return DEFAULT_WAIT_SECONDS


def wait_for_hosts(names, timeout, resolve=socket.getaddrinfo, clock=time.monotonic, sleep=time.sleep):
    """Return when every name in ``names`` resolves; raise :class:`PlatformError`
    naming the ones that still do not after ``timeout`` seconds."""
    pending = list(dict.fromkeys(names))
    if not pending or timeout <= 0:
        return
    started = clock()
    next_progress = started + PROGRESS_SECONDS
    errors = {}
    first_round = True
    while True:
        for name in list(pending):
            try:
                resolve(name, None)
            except (OSError, UnicodeError) as error:  # socket.gaierror is an OSError
                errors[name] = error
            else:
                pending.remove(name)
                errors.pop(name, None)
        now = clock()
        if not pending:
            if not first_round:
                log.info("all %d hosts resolve (after %.1f s)", len(names), now - started)
            return
        if first_round:
            log.info(
                "waiting up to %g s for the job's hosts to resolve: %s (set %s or --host-wait "
                "to change the bound)", timeout, ", ".join(pending), WAIT_ENV,
            )
            first_round = False
        elapsed = now - started
        if elapsed >= timeout:
            detail = "; ".join("%s: %s" % (name, _reason(errors.get(name))) for name in pending)
            raise PlatformError(
                "host%s %s did not resolve within %g s (%s): the other hosts of the job did not "
                "start or their names are not in DNS; the job may be retried"
                % ("s" if len(pending) > 1 else "", ", ".join(pending), timeout, detail)
            )
        if now >= next_progress:
            log.info(
                "still waiting for %s to resolve (%.0f s of %g s)", ", ".join(pending), elapsed, timeout
            )
            next_progress = now + PROGRESS_SECONDS
        sleep(min(RETRY_SECONDS, max(0.0, timeout - elapsed)))


def _reason(error):
    if error is None:
        return "no answer"
    return getattr(error, "strerror", None) or str(error) or type(error).__name__

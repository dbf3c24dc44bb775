"""One host's training run, and the one place errors become exit codes.

Order: read and validate the job root (nothing runs before that), install
requirements, build the environment and argv, run the user code, record the
outcome. Every failure ends in :func:`train`'s ``except`` clauses, which write
``output/failure`` and return the exit code documented in the package docstring.
"""

import errno
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback

from training_runtime import (
    commands,
    config,
    distributed,
    entrypoint,
    environment,
    hosts,
    lifetime,
    memory,
    metrics_echo,
    outcome,
    process,
    requirements,
    sagemaker,
    system_metrics,
    validation,
)
from training_runtime.errors import (
    SUCCESS,
    InvalidJobError,
    MaxRunExceededError,
    OutOfMemoryError,
    PlatformError,
    StoppedError,
    TrainingError,
    UserCodeError,
)
from training_runtime.layouts import DEFAULT_LAYOUT, layout_for

log = logging.getLogger(__name__)


def train(root=None, current_host=None, layout_name=None, check_only=False, environ=None, host_wait=None,
          max_run_seconds=None, die_with_parent=False, lease=None):
    """Run the job at ``root`` as ``current_host``; returns the exit code.

    ``check_only`` validates the job root and logs the argv without installing
    or running anything (nor writing output files). ``host_wait`` bounds the
    wait for the hosts of a multi-host job to resolve (see :mod:`training_runtime.hosts`).
    ``max_run_seconds``, ``die_with_parent`` and ``lease`` ((file, seconds)): see :mod:`training_runtime.lifetime`.
    """
    started_at = time.time()
    started = time.monotonic()
    environ = dict(os.environ if environ is None else environ)
    watch_parent = lifetime.wants_die_with_parent(die_with_parent, environ) and not check_only
    root = config.resolve_root(root, environ, layout_name)
    # output/ is at the same place in every layout, so failures can be recorded
    # even when the layout itself is what is wrong.
    outputs = layout_for(DEFAULT_LAYOUT, root)
    previous_handlers = _stop_on_signals()
    try:
        if watch_parent:  # after the handlers: the parent-death SIGTERM ends in output/failure like any stop
            lifetime.die_with_parent()
        if lease and not check_only:
            lifetime.watch_lease(*lease)
            watch_parent = True  # the user code still dies with train (SIGKILL), whatever ends train
        limit = lifetime.max_run_seconds(max_run_seconds, environ)
        deadline = started + limit if limit and not check_only else None
        if os.path.isdir(root) and not check_only:
            outcome.clear_stale(outputs, started_at)
        layout = _run(root, current_host, layout_name, check_only, environ, host_wait, deadline, limit,
                      watch_parent)
        if not check_only:
            outcome.write_success(outputs, layout.name)
            log.info("training succeeded")
    except TrainingError as error:
        return _report(outputs, error, check_only)
    except KeyboardInterrupt:
        return _report(outputs, _stopped(signal.SIGINT), check_only)
    except Exception as error:  # noqa: BLE001 - everything else is the runtime's fault
        failure = PlatformError(
            "internal error of the training runtime (%s: %s); the job may be retried"
            % (type(error).__name__, error),
            details=traceback.format_exc(),
        )
        return _report(outputs, failure, check_only)
    finally:
        _restore(previous_handlers)
    return SUCCESS


def _stopped(signum, details=""):
    return StoppedError(
        "training was stopped: train received %s" % signal.Signals(signum).name, signum, details
    )


def _stop_on_signals():
    """Outside the user code (whose runner forwards signals), SIGTERM/SIGHUP stop
    ``train`` through the same error path, so output/failure is still written."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    stopping = []

    def stop(signum, frame):
        if stopping:  # already on the way out: let the failure be written
            log.warning("received %s again; still stopping", signal.Signals(signum).name)
            return
        stopping.append(signum)
        raise _stopped(signum)

    return {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}


def _restore(previous_handlers):
    for signum, handler in previous_handlers.items():
        signal.signal(signum, handler)


def _shown(job, argv):
    """What the log says is run: a command as the user wrote it, its hyperparameters once."""
    return commands.shown(job.command, job.hyperparameters) if job.command else shlex.join(argv)


def _run(root, current_host, layout_name, check_only, environ, host_wait=None, deadline=None, limit=None,
         watch_parent=False):
    wait_seconds = hosts.wait_seconds(host_wait, environ)
    layout, job = config.load_job(root, layout_name, current_host, environ)
    if layout.name == "sagemaker" and not check_only:
        # lazy: fetching a submit directory needs urllib/http/ssl (~0.03 s), only in the sagemaker layout
        from training_runtime import submit

        submit.fetch(sagemaker.submit_directory(job), layout.code_dir, environ)
    validation.validate(job, layout)
    script = validation.resolve_entry_point(job, layout) if not job.command else None
    log.info(
        "job %s, layout %s, host %s (%d of %d)%s",
        job.job_name, layout.name, job.current_host, job.host_index + 1, len(job.hosts),
        ", distribution %s" % job.distribution if job.distribution else "",
    )
    plan = distributed.plan(job, layout)
    if plan.elastic:
        log.info("%s", distributed.describe_elastic(job))
    if check_only:
        argv = entrypoint.build(job, layout, sys.executable, plan, script)
        log.info("the job is valid; it would run: %s", _shown(job, argv))
        return layout

    python = requirements.prepare_python(layout, environ)
    resources = environment.detect_resources(job, environ)
    plan.write_files()
    argv = entrypoint.build(job, layout, python, plan, script)
    env = environment.build(job, layout, resources, environ, python)
    env.update(plan.env)
    for name, value in plan.env_defaults.items():
        env.setdefault(name, value)
    elastic_state = None
    if plan.elastic:  # the worker shim's notes for this host: private to this train, never in the job root
        elastic_state = tempfile.mkdtemp(prefix="train-elastic-")
        env[distributed.ELASTIC_STATE_ENV] = elastic_state
        env[distributed.ELASTIC_CHECKPOINTS_ENV] = layout.checkpoint_dir
    try:
        return _run_user_code(job, layout, argv, env, script, deadline, limit, watch_parent, wait_seconds, environ,
                              root, elastic_state)
    finally:
        if elastic_state is not None:
            shutil.rmtree(elastic_state, ignore_errors=True)


def _run_user_code(job, layout, argv, env, script, deadline, limit, watch_parent, wait_seconds, environ, root,
                   elastic_state):
    what = "command" if job.command else "entry point %s" % job.entry_point
    os.makedirs(layout.code_dir, exist_ok=True)  # a command may need no code, but needs a cwd
    if layout.name == "sagemaker" and environ.get("SM_STUDIO_LOCAL_MODE", "").lower() == "true":
        wait_seconds = 0  # sagemaker-training's own switch for "no DNS wait"
    if len(job.hosts) > 1:
        hosts.wait_for_hosts([job.address_of(host) for host in job.hosts], wait_seconds)
    log.info("running %s in %s: %s", what, layout.code_dir, _shown(job, argv))
    oom_kills_before = memory.oom_kill_count()
    if deadline is not None and time.monotonic() >= deadline:
        raise MaxRunExceededError(_over_limit(limit, "before the user code started (installing requirements)"))
    sampler = system_metrics.start(root, job.current_host, environ)  # CPU/memory/GPU into the metrics stream
    # The stream into our output too, where the platform asked for it: from the first host, as every host's job root
    # is the same directory there (the other hosts' points are in the same file).
    echo = metrics_echo.start(root, environ) if job.current_host == job.hosts[0] else None
    try:
        result = process.run(argv, cwd=layout.code_dir, env=env, deadline=deadline,
                             preexec_fn=lifetime.kill_child_with_us() if watch_parent else None)
    except OSError as error:
        if error.errno in (errno.ENOEXEC, errno.EACCES) and script and argv[0] == script:
            raise InvalidJobError(
                "entry point %r cannot be executed (%s): give it a #! line or use a .py/.sh file"
                % (job.entry_point, error.strerror)
            ) from None
        if error.errno == errno.E2BIG:
            raise InvalidJobError(
                "the hyperparameters are too large to pass to a process (%s): pass large values "
                "as a file in an input channel instead" % error.strerror
            ) from None
        raise PlatformError("could not start the user code (%s): %s" % (argv[0], error)) from None
    finally:
        if sampler is not None:
            sampler.stop()
        if echo is not None:  # after the sampler: its last point goes out too
            echo.stop()

    stderr_tail = "Last lines of its stderr:\n" + "\n".join(result.tail) if result.tail else ""
    if result.timed_out:
        raise MaxRunExceededError(_over_limit(limit, "and was stopped (exit code %d)" % result.exit_code),
                                  details=stderr_tail)
    if result.stopped_by is not None:
        name = signal.Signals(result.stopped_by).name
        raise StoppedError(
            "training was stopped: train received %s and forwarded it to the user code "
            "(exit code %d)" % (name, result.exit_code),
            result.stopped_by,
            details=stderr_tail,
        )
    if result.exit_code != 0:
        _raise_if_out_of_memory(what, result, oom_kills_before, stderr_tail)
        if elastic_state is not None:
            _raise_elastic_failure(what, result, elastic_state, script, stderr_tail)
        raise UserCodeError(
            "the user code (%s) failed with exit code %d%s"
            % (what, result.exit_code, _signal_hint(result.exit_code)),
            details=stderr_tail,
            child_exit_code=result.exit_code,
        )
    if elastic_state is not None:
        starts = _elastic_note(elastic_state, "starts") or "1"
        log.info("elastic: finished; the workers of this host started %s time(s)", starts)
        _forget_lost_hosts_failure(layout, elastic_state)
    return layout


def _forget_lost_hosts_failure(layout, state):
    """Hosts share the job root: a host lost earlier (stopped, killed) wrote output/failure before the group re-formed
    without it. The group finished, so that failure is not the job's: remove it, or no host would write success. A
    failure written after this host's last start came from a member of the group that finished, and stays."""
    try:
        last_start = os.stat(os.path.join(state, "starts")).st_mtime
        written = os.stat(layout.failure_file).st_mtime
    except OSError:
        return
    if written < last_start:
        try:
            with open(layout.failure_file, encoding="utf-8", errors="replace") as handle:
                first = handle.readline().strip()
            os.remove(layout.failure_file)
        except OSError:
            return
        log.info("elastic: removed output/failure left by a host lost before the group re-formed (%s)", first[:300])


def _elastic_note(state, name):
    try:
        with open(os.path.join(state, name), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _raise_elastic_failure(what, result, state, script, stderr_tail):
    """torchrun failed: the script's own error (the worker shim said so: no restart was made), else the group could
    not go on (restarts used up, the rendezvous lost): a platform error, retryable from the last checkpoint."""
    user_error = _elastic_note(state, "user-error")
    if user_error:
        summary, _, traceback_text = user_error.partition("\n")
        raise UserCodeError(
            "the user code (%s) failed with exit code %d: %s (the script's own error: elastic training does not "
            "restart it)" % (what, result.exit_code, summary),
            details=traceback_text or stderr_tail,  # torchrun's lines end its stderr: the script's traceback instead
            child_exit_code=result.exit_code,
        )
    if not script or not script.endswith(".py"):
        return  # no shim in front of a command or a .sh: torchrun's failure is the user code's, as without elastic
    lost = _elastic_note(state, "peer-lost")
    raise PlatformError(
        outcome.GROUP_BROKE_UP + " (torchrun exit code %d%s): its restarts are used up or its rendezvous "
        "is gone (host 0 holds it); the job may be retried and resumes from its last checkpoint"
        % (result.exit_code, "; last lost peer: " + lost if lost else ""),
        details=stderr_tail,
    )


def _over_limit(limit, what):
    return ("the training ran past max_run_seconds=%g %s; raise max_run_seconds or make it faster "
            "(save checkpoints to resume)" % (limit, what))


def _raise_if_out_of_memory(what, result, oom_kills_before, stderr_tail):
    """SIGKILL is what the kernel's OOM killer sends (and nothing of ours sends it
    to a running child): the OOM class, not a user error. A child that failed
    otherwise after the OOM killer struck in our cgroup (torchrun or a data loader
    losing a worker) is the OOM class too."""
    oom_kills = memory.oom_kill_count()
    killed_by_oom = None not in (oom_kills, oom_kills_before) and oom_kills > oom_kills_before
    limit = memory.describe_limit(memory.memory_limit())
    if result.exit_code == 128 + signal.SIGKILL:
        cause = (
            "the kernel's OOM killer killed it: it ran out of memory"
            if killed_by_oom
            else "likely out of memory (the kernel's OOM killer sends SIGKILL)"
        )
        message = "the user code (%s) was killed by SIGKILL: %s" % (what, cause)
    elif killed_by_oom:
        message = (
            "the user code (%s) failed with exit code %d after the kernel's OOM killer killed "
            "one of its processes: it ran out of memory" % (what, result.exit_code)
        )
    else:
        return
    if limit:
        message += " (%s)" % limit
    raise OutOfMemoryError(
        message + "; give the job more memory or make it use less",
        details=stderr_tail,
        child_exit_code=result.exit_code,
    )


def _signal_hint(exit_code):
    if exit_code <= 128:
        return ""
    try:
        name = signal.Signals(exit_code - 128).name
    except ValueError:
        return ""
    return " (killed by %s)" % name


def _report(outputs, error, check_only):
    log.error("%s", error)
    if isinstance(error, PlatformError) and error.details:
        log.error("%s", error.details.rstrip())
    if not check_only and os.path.isdir(outputs.root):
        try:
            outcome.write_failure(outputs, error.failure_text())
        except OSError as write_error:
            log.error("could not write %s: %s", outputs.failure_file, write_error)
    return error.exit_code

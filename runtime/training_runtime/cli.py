"""``train [--root DIR] [--current-host NAME] [--layout NAME] [--check]``."""

import argparse
import logging
import os
import sys

from training_runtime import __version__
from training_runtime.environment import read_job_variables
from training_runtime.errors import PLATFORM_ERROR
from training_runtime.files import write_atomically
from training_runtime.layouts import LAYOUT_NAMES

LOG_PREFIX = "[train]"


class _Formatter(logging.Formatter):
    def format(self, record):
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            message = "%s: %s" % (record.levelname, message)
        return "%s %s" % (LOG_PREFIX, message)


def configure_logging(level=logging.INFO):
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    logger = logging.getLogger("training_runtime")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="train",
        description="Run one host's share of a training job from a job root "
        "(TI-ONE / PAI / SageMaker / ModelArts contract).",
        epilog="Exit codes: 0 success, 1 user code failed, 2 invalid job, "
        "3 requirements.txt install failed, 4 platform error (retryable), 5 ran past --max-run-seconds, "
        "137 the user code was killed by SIGKILL (out of memory), 128+n stopped by signal n.",
    )
    parser.add_argument(
        "--root",
        help="the job root (default: $TRAINING_ROOT, else the container root of --layout, else /opt/ml)",
    )
    parser.add_argument(
        "--current-host",
        help="this host's name in resourceconfig.json hosts (default: $TRAINING_CURRENT_HOST, "
        "hosts[$JOB_COMPLETION_INDEX], else resourceconfig.json current_host)",
    )
    parser.add_argument(
        "--layout",
        help="directory layout: %s (default: trainingjobconfig.json layout, else ti)"
        % ", ".join(LAYOUT_NAMES),
    )
    parser.add_argument(
        "--host-wait",
        metavar="SECONDS",
        help="how long a multi-host job waits for every host name to resolve before the user "
        "code starts (default: $TRAINING_HOST_WAIT_SECONDS, else 120; 0: do not wait)",
    )
    parser.add_argument(
        "--max-run-seconds",
        metavar="SECONDS",
        help="stop the user code (SIGTERM, then SIGKILL) when the job has run this long, counted from "
        "train's start; exit code 5 (default: $TRAINING_MAX_RUN_SECONDS, else no limit)",
    )
    parser.add_argument(
        "--die-with-parent",
        action="store_true",
        help="stop the training when the process that started train dies (Linux parent-death signal; "
        "also $TRAINING_DIE_WITH_PARENT=1): for launchers that run train as a child process",
    )
    parser.add_argument(
        "--lease",
        metavar="FILE",
        help="stop the training when FILE was not touched for --lease-seconds: for launchers that may die and "
        "be replaced by another that reattaches (the local backend's task retries)",
    )
    parser.add_argument("--lease-seconds", metavar="SECONDS", type=float, default=0.0,
                        help="how long the --lease file may go untouched (default: no lease)")
    parser.add_argument(
        "--exit-file",
        metavar="FILE",
        help="write train's exit code to FILE when it ends, for a launcher that did not start it and so cannot "
        "wait for it",
    )
    parser.add_argument(
        "--environment-fd",
        metavar="FD",
        type=int,
        help="read the job's own environment variables (a JSON object of names to strings) from the inherited "
        "descriptor FD, close it, and add them to train's environment before anything else: for launchers whose "
        "privileged processes start train and must not run with the job's variables (the local backend's sandbox)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate the job root and print what would run; install and run nothing",
    )
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    configure_logging()
    if args.environment_fd is not None:
        try:
            os.environ.update(read_job_variables(args.environment_fd))
        except (OSError, ValueError) as error:  # the launcher's to fix: a retry may help
            logging.getLogger("training_runtime").error("cannot read the job's environment (--environment-fd %d): %s",
                                                        args.environment_fd, error)
            return PLATFORM_ERROR
    # lazy: the trainer only for the train command (the others start light)
    from training_runtime.trainer import train

    code = train(
        root=args.root,
        current_host=args.current_host,
        layout_name=args.layout,
        check_only=args.check,
        host_wait=args.host_wait,
        max_run_seconds=args.max_run_seconds,
        die_with_parent=args.die_with_parent,
        lease=(args.lease, args.lease_seconds) if args.lease and args.lease_seconds else None,
    )
    if args.exit_file:
        write_atomically(args.exit_file, "%d\n" % code)  # a reader sees no file or the whole code
    return code

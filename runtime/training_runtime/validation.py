"""Checks that run before anything else: a refused job raises
:class:`~training_runtime.errors.InvalidJobError` (exit code 2) with one line
naming the file or field and what to do."""

import logging
import os
import re

from training_runtime import hyperparameters as hps
from training_runtime.config import (
    HYPERPARAMETERS_FILE,
    INPUT_DATA_CONFIG_FILE,
    TRAINING_JOB_CONFIG_FILE,
)
from training_runtime.errors import InvalidJobError

log = logging.getLogger(__name__)

CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def validate(job, layout):
    """Raise :class:`InvalidJobError` for the first problem found."""
    _check_hyperparameters(job, layout)
    _check_channels(job, layout)
    _check_launch(job, layout)
    _check_distribution(job, layout)


def resolve_entry_point(job, layout):
    """Absolute path of the entry point inside the code directory (validated)."""
    name = job.entry_point
    source = job.entry_point_source
    # A lexical check: "../x" and absolute paths are refused, while a code
    # directory (or a script in it) that is a symlink still works.
    code_dir = os.path.normpath(layout.code_dir)
    path = os.path.normpath(os.path.join(code_dir, name))
    if os.path.commonpath([code_dir, path]) != code_dir or path == code_dir:
        raise InvalidJobError(
            "entry point %r (%s) is outside the code directory %s: give a path relative to it, "
            "e.g. 'train.py' or 'src/train.sh'" % (name, source, layout.code_dir)
        )
    if not os.path.isfile(path):
        raise InvalidJobError(
            "entry point %r (%s) not found in the code directory %s: check the name and that "
            "the job's source_dir contains it" % (name, source, layout.code_dir)
        )
    return path


def _check_hyperparameters(job, layout):
    path = layout.config_file(HYPERPARAMETERS_FILE)
    seen = {}
    for hp in job.hyperparameters:
        if not hp.name.strip():
            raise InvalidJobError(
                "%s: a hyperparameter has an empty name (value %r): give every hyperparameter a name"
                % (path, hp.raw)
            )
        if "\0" in hp.name or "\0" in hp.raw:
            raise InvalidJobError(
                "%s: hyperparameter %r contains a NUL character, which cannot be passed to a "
                "process: remove it" % (path, hp.name)
            )
        suffix = hps.env_suffix(hp.name)
        if suffix in seen:
            raise InvalidJobError(
                "%s: hyperparameters %r and %r both become PAI_HPS_%s: rename one of them"
                % (path, seen[suffix], hp.name, suffix)
            )
        seen[suffix] = hp.name


def _check_channels(job, layout):
    path = layout.config_file(INPUT_DATA_CONFIG_FILE)
    seen = {}
    for channel in job.channels:
        if not CHANNEL_NAME.match(channel):
            raise InvalidJobError(
                "%s: channel name %r is not allowed: use only letters, digits, '_' and '-'"
                % (path, channel)
            )
        suffix = hps.env_suffix(channel)
        if suffix in seen:
            raise InvalidJobError(
                "%s: channels %r and %r both become PAI_INPUT_%s: rename one of them"
                % (path, seen[suffix], channel, suffix)
            )
        seen[suffix] = channel
        if not os.path.isdir(layout.channel_dir(channel)):
            log.warning("channel %s has no directory %s", channel, layout.channel_dir(channel))
    job_file = layout.config_file(TRAINING_JOB_CONFIG_FILE)
    for channel, filename in job.channel_files.items():
        if channel not in job.channels:
            raise InvalidJobError(
                "%s: 'channel_files' names channel %r, which is not in %s: use one of %s"
                % (job_file, channel, INPUT_DATA_CONFIG_FILE, ", ".join(job.channels) or "(none)")
            )
        parts = filename.replace("\\", "/").split("/")
        if filename.startswith("/") or ".." in parts:
            raise InvalidJobError(
                "%s: 'channel_files' %r for channel %r must be a file name inside the channel "
                "directory" % (job_file, filename, channel)
            )


def _check_launch(job, layout):
    job_file = layout.config_file(TRAINING_JOB_CONFIG_FILE)
    if job.command:
        if "\0" in job.command:
            raise InvalidJobError("%s: 'command' contains a NUL character: remove it" % job_file)
        return
    if not job.entry_point:
        raise InvalidJobError(
            "nothing to run: set 'entry_point' or 'command' in %s (or the ti_program / "
            "sagemaker_program hyperparameter)" % job_file
        )
    path = resolve_entry_point(job, layout)
    # sagemaker-training makes any entry point executable; so does the sagemaker layout.
    if layout.name != "sagemaker" and not path.endswith((".py", ".sh")) and not os.access(path, os.X_OK):
        raise InvalidJobError(
            "entry point %r is neither a .py nor a .sh file and is not executable: rename it or "
            "make it executable (chmod +x)" % job.entry_point
        )


def _check_distribution(job, layout):
    job_file = layout.config_file(TRAINING_JOB_CONFIG_FILE)
    if job.distribution == "tensorflow" and job.parameter_servers >= len(job.hosts) > 1:
        raise InvalidJobError(
            "%s: 'parameter_servers' is %d but there are only %d hosts: leave at least one worker"
            % (job_file, job.parameter_servers, len(job.hosts))
        )
    if job.parameter_servers and job.distribution != "tensorflow":
        log.warning("'parameter_servers' only applies to distribution tensorflow; ignored")
    if job.processes_per_host > 1 and job.distribution not in ("pytorch", "mpi"):
        log.warning(
            "'processes_per_host' %d only applies to distribution pytorch or mpi; "
            "one process runs on this host",
            job.processes_per_host,
        )
    unknown = sorted(set(job.host_addresses) - set(job.hosts))
    if unknown:
        log.warning("'host_addresses' names hosts not in resourceconfig.json: %s", ", ".join(unknown))

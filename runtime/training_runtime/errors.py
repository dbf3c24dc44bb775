"""Exit codes and the errors that map to them.

Every failure the runtime knows about is one of these exceptions; the single
place that turns them into ``output/failure`` and an exit code is
:func:`training_runtime.trainer.train`.
"""

SUCCESS = 0
USER_CODE_FAILED = 1
INVALID_JOB = 2
REQUIREMENTS_FAILED = 3
PLATFORM_ERROR = 4
#: The user code ran longer than max_run_seconds (--max-run-seconds) and was stopped.
MAX_RUN_EXCEEDED = 5
#: The user code was killed by SIGKILL (128 + 9), almost always the kernel's OOM
#: killer; the code Docker and Kubernetes report for an OOM-killed container.
OUT_OF_MEMORY = 137

# The failure classes: the one definition, which the launchers read (operators/launch/base.py) and the launch stage
# maps to retry / no-retry. The first five follow from an exit code of `train`; the last three only a launcher sees.
USER_ERROR_CLASS = "user_error"
PLATFORM_ERROR_CLASS = "platform_error"
OOM_CLASS = "oom_killed"
STOPPED_CLASS = "stopped"
TIMEOUT_CLASS = "timeout"
IMAGE_ERROR_CLASS = "image_error"
EVICTED_CLASS = "evicted"
DISK_LIMIT_CLASS = "disk_limit"  # the platform stopped a job whose job root outgrew its disk cap

#: exit code -> failure class; 128+n other than 137 is ``stopped`` (the launcher decides).
EXIT_CLASSES = {
    USER_CODE_FAILED: USER_ERROR_CLASS,
    INVALID_JOB: USER_ERROR_CLASS,
    REQUIREMENTS_FAILED: USER_ERROR_CLASS,
    PLATFORM_ERROR: PLATFORM_ERROR_CLASS,
    MAX_RUN_EXCEEDED: TIMEOUT_CLASS,
    OUT_OF_MEMORY: OOM_CLASS,
}


def failure_class(exit_code):
    """The failure class of a ``train`` exit code (None for success).

    ``user_error`` (1-3: retrying will not help), ``platform_error`` (4:
    retryable), ``timeout`` (5: max_run_seconds reached), ``oom_killed`` (137: needs more memory or a smaller batch),
    ``stopped`` (other 128+n: train was stopped by signal n), else
    ``platform_error`` (not a code train exits with: the container died).
    """
    if exit_code == SUCCESS:
        return None
    if exit_code in EXIT_CLASSES:
        return EXIT_CLASSES[exit_code]
    if exit_code is not None and 128 < exit_code < 160:
        return STOPPED_CLASS
    return PLATFORM_ERROR_CLASS


class TrainingError(Exception):
    """Base class: ``str(error)`` is the one-line reason a person can act on."""

    exit_code = PLATFORM_ERROR
    #: True when retrying the same job cannot help (the user has to change something).
    user_error = False

    def __init__(self, message, details=""):
        super().__init__(message)
        #: Extra lines for output/failure (stderr tail, pip output); not logged twice.
        self.details = details

    def failure_text(self):
        text = str(self)
        if self.details:
            text += "\n" + self.details.rstrip("\n")
        return text + "\n"


class InvalidJobError(TrainingError):
    """The job root describes a job that cannot run; refused before anything ran."""

    exit_code = INVALID_JOB
    user_error = True


class RequirementsError(TrainingError):
    """``pip install -r code/requirements.txt`` failed."""

    exit_code = REQUIREMENTS_FAILED
    user_error = True


class UserCodeError(TrainingError):
    """The user's entry point or command exited with a non-zero code."""

    exit_code = USER_CODE_FAILED
    user_error = True

    def __init__(self, message, details="", child_exit_code=1):
        super().__init__(message, details)
        self.child_exit_code = child_exit_code


class OutOfMemoryError(TrainingError):
    """The user code was killed by SIGKILL (the OOM killer, as a rule), or the
    kernel's OOM killer killed one of its processes and it then failed."""

    exit_code = OUT_OF_MEMORY
    user_error = False

    def __init__(self, message, details="", child_exit_code=137):
        super().__init__(message, details)
        self.child_exit_code = child_exit_code


class MaxRunExceededError(TrainingError):
    """The job ran past its max_run_seconds; ``train`` stopped the user code itself, so the limit holds even when
    whatever launched ``train`` is gone."""

    exit_code = MAX_RUN_EXCEEDED
    user_error = False


class StoppedError(TrainingError):
    """``train`` itself received SIGTERM/SIGINT and stopped the user code."""

    user_error = False

    def __init__(self, message, signum, details=""):
        super().__init__(message, details)
        self.signum = signum
        self.exit_code = 128 + signum


class PlatformError(TrainingError):
    """Something outside the user's control failed (disk, venv creation, a host
    that never resolved, ...); retrying the job may help."""

    exit_code = PLATFORM_ERROR

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


class StoppedError(TrainingError):
    """``train`` itself received SIGTERM/SIGINT and stopped the user code."""

    user_error = False

    def __init__(self, message, signum, details=""):
        super().__init__(message, details)
        self.signum = signum
        self.exit_code = 128 + signum


class PlatformError(TrainingError):
    """Something outside the user's control failed (disk, venv creation, ...)."""

    exit_code = PLATFORM_ERROR

"""How the job's own variables reach its code on the local backend: never through a privileged process.

The processes the launcher starts run as root on a root worker (bubblewrap; setpriv inside the sandbox until it drops
to the job's uid; nsenter for a job's further hosts; slirp4netns), and the loader acts on LD_PRELOAD, LD_AUDIT,
LD_LIBRARY_PATH, ... in any process that execs with them: a job variable in their environment is the tenant's code as
host root. So they all get the environment the launcher builds from platform values alone
(LocalLauncherHook._environment), and the job's variables (the spec's `environment`, secrets by reference included)
go to `train` on a descriptor (`train --environment-fd`, runtime/training_runtime/environment.py): `train`, already
the job's unprivileged user, reads and closes it and applies them to its own environment, hence to the user code's,
where a tenant keeps using them (jemalloc through LD_PRELOAD). The same with local_sandbox = none.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile

from operators.launch.base import LaunchRequest
from training_runtime.contract import JOB_VENV_ENV, ROOT_ENV

# What the platform sets for `train` and a job's variable does not change (as before: the runtime found on
# PYTHONPATH, the job root it runs, its own venv).
PLATFORM_NAMES = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", ROOT_ENV, JOB_VENV_ENV})


def job_variables(request: LaunchRequest) -> dict[str, str]:
    """The job's own variables, which `train` applies over the launcher's environment (PLATFORM_NAMES excepted)."""
    return {name: value for name, value in {**request.env, **request.secret_env}.items()
            if name not in PLATFORM_NAMES}


def job_variables_fd(variables: dict[str, str], directory: str) -> int:
    """A descriptor of a file holding `variables` as JSON, for `train --environment-fd` (close-on-exec: only the
    process it is passed to gets it). They include the job's secrets, so never a file anyone can open by name: a
    sealed memory file, or where the system has none (the SDK's local mode on macOS) one already unlinked from the
    worker-only `directory`."""
    sealed = hasattr(os, "memfd_create")
    if sealed:
        fd = os.memfd_create("training-environment", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    else:
        fd, path = tempfile.mkstemp(dir=directory)
        os.unlink(path)
    try:
        data = memoryview(json.dumps(variables).encode())
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)  # train reads from the (shared) offset
        if sealed:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return fd

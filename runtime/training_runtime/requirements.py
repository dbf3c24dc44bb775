"""Installing ``code/requirements.txt`` without touching the runtime's Python.

In local mode ``train`` runs with the Airflow worker's interpreter, so pip must
never install into it. When the code directory has a ``requirements.txt`` the
runtime creates a virtual environment that sees everything the runtime's Python
sees (``--system-site-packages``, plus a ``.pth`` naming the runtime's own
site-packages when that is itself a virtual environment), pip-installs the
requirements into it, and runs the user code with that environment's python.

Where the environment lives: ``$TRAINING_PIP_CACHE/<key>`` when that variable
is set (shared across jobs: what user code pip-installs at run time stays there
too), else ``<root>/.venv-job``. The key hashes the
requirements file, the interpreter, and the files of local requirements
(``./mypkg``, ``-e ../lib``, ``file:...``: names, sizes, modification times), so
an environment is reused only for the same inputs. Hosts sharing a job root
(local mode) take a file lock: one installs, the others reuse its result.
pip's output goes to the log; a failure raises
:class:`~training_runtime.errors.RequirementsError` (exit code 3).

``TRAINING_JOB_VENV=1`` (for local mode) runs the user code in ``<root>/.venv-job``
even without a requirements.txt, so nothing the user code does with pip reaches
the runtime's (Airflow's) environment.
"""

import fcntl
import hashlib
import importlib.machinery
import logging
import os
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import time

from training_runtime import process
from training_runtime.contract import JOB_VENV_ENV
from training_runtime.errors import PlatformError, RequirementsError, StoppedError

log = logging.getLogger(__name__)

REQUIREMENTS_FILE = "requirements.txt"
JOB_VENV_DIR = ".venv-job"
_MARKER = ".training-runtime-requirements"
_PIP_TAIL_LINES = 25


def prepare_python(layout, environ=None, python=None):
    """The interpreter the user code runs with (installing requirements first)."""
    environ = os.environ if environ is None else environ
    python = python or sys.executable
    requirements = os.path.join(layout.code_dir, REQUIREMENTS_FILE)
    if not os.path.isfile(requirements):
        if environ.get(JOB_VENV_ENV, "").lower() not in ("1", "true", "yes"):
            return python
        # Isolation without requirements (local mode): user code that pip-installs
        # at run time changes only this job's environment. Never shared.
        return _ensure_venv(os.path.join(layout.root, JOB_VENV_DIR), _key(b"", python), python)
    with open(requirements, "rb") as f:
        content = f.read()
    key = _key(content, python, _local_paths(content.decode("utf-8", "replace"), layout.code_dir))
    cache = environ.get("TRAINING_PIP_CACHE")
    venv = os.path.join(cache, key) if cache else os.path.join(layout.root, JOB_VENV_DIR)
    return _ensure_venv(
        venv, key, python, lambda venv_python: _install(venv_python, requirements, layout.code_dir, venv, environ)
    )


def _ensure_venv(venv, key, python, install=None):
    """Create ``venv`` (and run ``install``) unless it is complete for ``key``."""
    venv_python = os.path.join(venv, "bin", "python")
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with _locked(venv + ".lock"):
        if _read_marker(venv) == key:
            log.info("reusing the environment %s", venv)
            return venv_python
        started = time.monotonic()
        log.info("creating the job's environment %s", venv)
        _create_venv(venv, python)
        if install is not None:
            install(venv_python)
            log.info("installed requirements.txt in %.1f s", time.monotonic() - started)
        with open(os.path.join(venv, _MARKER), "w") as f:
            f.write(key)
    return venv_python


def _create_venv(venv, python):
    shutil.rmtree(venv, ignore_errors=True)
    # The runtime's own interpreter (the default) creates the environment in this process: `python -m venv`, asking
    # the new python for its site-packages and whether it imports pip were three interpreter starts, ~0.3-0.6 s of a
    # local job's start (bench/README.md, "No-op job"). Another interpreter is asked, as before.
    here = python == sys.executable and "venv" in sysconfig.get_scheme_names()  # the venv scheme: Python 3.11+
    venv_python = os.path.join(venv, "bin", "python")
    if here:
        import venv as venv_module  # lazy: only where a job's environment is created (~0.02 s)

        try:
            # what `python -m venv --system-site-packages --without-pip` does (it links the interpreter on POSIX)
            venv_module.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=os.name != "nt").create(venv)
        except (OSError, subprocess.SubprocessError) as error:
            raise PlatformError("could not create the job's virtual environment %s: %s" % (venv, error))
        # where the new python installs (sysconfig's venv scheme is what it uses: its sys.prefix is the venv)
        purelib = sysconfig.get_path("purelib", "venv", vars={"base": venv, "platbase": venv})
    else:
        created = subprocess.run(
            [python, "-m", "venv", "--system-site-packages", "--without-pip", venv],
            capture_output=True,
            text=True,
        )
        if created.returncode != 0:
            raise PlatformError(
                "could not create the job's virtual environment %s: %s"
                % (venv, (created.stderr or created.stdout).strip().splitlines()[-1:])
            )
        purelib = subprocess.run(
            [venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    # --system-site-packages only reaches the *base* interpreter's packages; when
    # the runtime itself runs in a virtual environment (local mode: Airflow's
    # venv), add its site-packages too so the user code sees the same packages.
    # addsitedir (not a plain path line) also runs that directory's own .pth
    # files (editable installs). They come after the new environment's own
    # site-packages, so what requirements.txt installs wins.
    parent_dirs = []
    if sys.prefix != sys.base_prefix:
        parent_dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
        with open(os.path.join(purelib, "_training_runtime_parent.pth"), "w") as f:
            f.write("import site; list(map(site.addsitedir, %r))\n" % (parent_dirs,))
    if not (here and _pip_on(purelib, parent_dirs)):  # else the new python is asked
        has_pip = subprocess.run([venv_python, "-c", "import pip"], capture_output=True).returncode == 0
        if not has_pip:
            bootstrap = subprocess.run(
                [venv_python, "-m", "ensurepip", "--default-pip"], capture_output=True, text=True
            )
            if bootstrap.returncode != 0:
                raise PlatformError(
                    "pip is not available to install requirements.txt (ensurepip failed: %s)"
                    % bootstrap.stderr.strip().splitlines()[-1:]
                )


def _pip_on(purelib, parent_dirs):
    """Whether pip is in a directory the new environment's python imports from: its own site-packages, the base
    interpreter's (--system-site-packages) or the runtime's (the .pth above). Not found there: unknown."""
    directories = [purelib, *site.getsitepackages([sys.base_prefix]), *parent_dirs]
    return importlib.machinery.PathFinder.find_spec("pip", directories) is not None


def _install(venv_python, requirements, code_dir, venv, environ):
    log.info("installing %s", requirements)
    env = dict(environ)
    env["VIRTUAL_ENV"] = venv
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", os.defpath)
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    env.pop("PYTHONHOME", None)
    argv = [venv_python, "-m", "pip", "install", "--no-input", "-r", requirements]
    # pip resolves ./relative requirements against its working directory.
    result = process.run(
        argv,
        cwd=code_dir,
        env=env,
        merge_output=True,
        output=getattr(sys.stderr, "buffer", sys.stderr),
        tail_lines=_PIP_TAIL_LINES,
    )
    if result.stopped_by is not None:
        raise StoppedError(
            "training was stopped: train received %s while installing requirements.txt"
            % signal.Signals(result.stopped_by).name,
            result.stopped_by,
        )
    if result.exit_code != 0:
        raise RequirementsError(
            "pip install -r requirements.txt failed with exit code %d: fix the requirement "
            "pip names below (in the job's source_dir)" % result.exit_code,
            details="Last lines of pip's output:\n" + "\n".join(result.tail),
        )


def _key(requirements_content, python, local_paths=()):
    digest = hashlib.sha256()
    digest.update(requirements_content)
    digest.update(os.path.realpath(python).encode())
    digest.update(sys.version.encode())
    for path in local_paths:
        for name, size, mtime in _tree_signature(path):
            digest.update(("%s\0%d\0%d\n" % (name, size, mtime)).encode())
    return digest.hexdigest()[:20]


def _local_paths(text, code_dir):
    """Existing local files/directories the requirements name (``./pkg``,
    ``-e ../lib``, ``file:///abs/pkg``, ``name @ file:...``)."""
    found = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for token in line.replace("=", " ").split():
            if token.startswith("file:"):
                token = token[len("file:"):]
                while token.startswith("//"):
                    token = token[1:]
            if token.startswith((".", "/", "~")):
                path = os.path.join(code_dir, os.path.expanduser(token))
                if os.path.exists(path):
                    found.append(path)
    return found


def _tree_signature(path):
    if os.path.isfile(path):
        stat = os.stat(path)
        return [(path, stat.st_size, stat.st_mtime_ns)]
    signature = []
    for directory, subdirs, files in os.walk(path):
        # Skip what building the package writes into its own tree, so a build
        # does not change the key of the environment it was built for.
        subdirs[:] = sorted(
            d for d in subdirs
            if d not in ("__pycache__", ".git", "build") and not d.endswith(".egg-info")
        )
        for name in sorted(files):
            full = os.path.join(directory, name)
            try:
                stat = os.stat(full)
            except OSError:
                continue
            signature.append((os.path.relpath(full, path), stat.st_size, stat.st_mtime_ns))
    return signature


def _read_marker(venv):
    try:
        with open(os.path.join(venv, _MARKER)) as f:
            return f.read().strip()
    except OSError:
        return None


class _locked:
    """An exclusive ``flock`` on ``path`` for the duration of a ``with`` block."""

    def __init__(self, path):
        self.path = path
        self.handle = None

    def __enter__(self):
        self.handle = open(self.path, "a")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another host is installing requirements.txt; waiting for it")
            fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()

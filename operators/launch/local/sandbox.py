"""What user code on the local backend may see: an allowlisted environment and, with bubblewrap, only its job root.

The local backend runs user code on the Airflow worker itself, next to airflow.db, airflow.cfg, the secrets file
and the worker's credentials. Two layers keep those away from it:

- the environment is built from an allowlist (locale, PATH, proxies, pip's index, GPU selection, plus the names in
  [training] local_environment), never by removing known-bad names: a secret nobody thought of does not leak;
- with [training] local_sandbox = bubblewrap (the default), `train` runs in a bubblewrap mount and PID namespace
  (Debian's `bubblewrap`, installed by `make install`). The file system it sees is an allowlist too: the system
  (/usr, /etc, ...) and the Python that runs it read-only, its own job root read-write, its channels' cache entries
  read-only, a private /tmp. AIRFLOW_HOME, the metadata DB, airflow.cfg, the secrets file, other jobs' roots and
  the worker's home are simply not there. Its PID namespace dies with `train`: when `train` ends (by itself, or
  when its launcher's lease runs out, operators/launch/local/launcher.py), every process the user code started goes too. The local
  launcher leaves out bubblewrap's --die-with-parent so a task retry can reattach. It gets a network namespace of
  the job's own (operators/launch/local/network.py): the worker's loopback services are not there either. No capabilities are kept
  (--cap-drop ALL), and /dev is a minimal one (GPU device nodes added), so a root worker's user code cannot read raw disks.

Why bubblewrap rather than a separate unprivileged user: a user id only protects files whose modes say so
(airflow.cfg and job roots are world-readable as written by default), needs root to switch to and chown'd job roots
and caches; a mount namespace hides everything not listed, for whichever user runs the worker, and the PID
namespace gives "no orphans" for free.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys

SANDBOXES = ("bubblewrap", "none")

# Names of the worker's environment that reach user code (besides [training] local_environment).
ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CERT",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS",
})
ALLOWED_PREFIXES = ("LC_",)


def user_environment(environ, extra_names=()) -> dict[str, str]:
    """The part of the worker's environment user code may see (an allowlist)."""
    extra = set(extra_names)
    return {k: v for k, v in environ.items() if k in ALLOWED_NAMES or k in extra or k.startswith(ALLOWED_PREFIXES)}


def runtime_path() -> str:
    """The directory the worker imports training_runtime from: put on the training's PYTHONPATH so both agree."""
    import training_runtime

    return os.path.dirname(os.path.dirname(os.path.abspath(training_runtime.__file__)))


class SandboxUnavailable(RuntimeError):
    pass


@functools.lru_cache(maxsize=2)
def _probe(unshare_net: bool) -> str | None:
    """None when bubblewrap can make the namespaces here, else why not (one line)."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "bwrap is not installed"
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-pid", *(["--unshare-net"] if unshare_net else []),
                            "--die-with-parent", "--cap-drop", "ALL", "true"], capture_output=True, text=True)
    if probe.returncode:
        return (probe.stderr or probe.stdout).strip().splitlines()[-1] if (probe.stderr or probe.stdout) else \
            f"bwrap exited {probe.returncode}"
    return None


def check_available(unshare_net: bool = True) -> None:
    problem = _probe(unshare_net)
    if problem:
        raise SandboxUnavailable(
            f"the local backend's sandbox cannot start ({problem}): install Debian's bubblewrap "
            f"(`make install` does, as root) or set [training] local_sandbox = none to run user code unsandboxed")


def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), runtime_path()}
    return sorted(p for p in paths if p and os.path.isdir(p))


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def bwrap_command(command: list[str], job_root: str, readonly: list[str] = (), hide: str | None = None,
                  die_with_parent: bool = True, unshare_net: bool = False, files_readonly: dict[str, str] = None,
                  status_fd: int | None = None, block_fd: int | None = None) -> list[str]:
    """`command` wrapped in bubblewrap: sees the system and Python read-only, `job_root` read-write, `readonly`
    read-only; `hide` (AIRFLOW_HOME) is covered by an empty tmpfs should it lie inside the system tree.
    die_with_parent=False: the sandbox outlives its launcher (the local launcher's lease stops it instead).
    unshare_net: a network namespace of its own (operators/launch/local/network.py). files_readonly: {path on the worker: path inside}
    bound read-only (the same inode: the worker's updates show through). status_fd: bubblewrap writes the sandbox's
    pid and namespaces, then its exit code, there (JSON lines; never visible to the sandbox). block_fd: the command
    starts once something can be read from it."""
    argv = [shutil.which("bwrap") or "bwrap", *(["--die-with-parent"] if die_with_parent else []), "--unshare-pid",
            *(["--unshare-net"] if unshare_net else []), "--unshare-ipc", "--unshare-uts", "--new-session",
            "--cap-drop", "ALL"]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    for top in ("/usr", "/etc"):
        if os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--ro-bind-try", "/sys", "/sys",
             "--tmpfs", "/tmp"]
    for device in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri")):
        argv += ["--dev-bind", device, device]
    if hide and any(_inside(os.path.realpath(hide), top) for top in ("/usr", "/etc")):
        argv += ["--tmpfs", hide]  # an AIRFLOW_HOME inside the system tree is hidden all the same
    for path in _python_paths():
        argv += ["--ro-bind", path, path]
    for path in readonly:
        argv += ["--ro-bind-try", path, path]
    argv += ["--bind", job_root, job_root]
    for path, inside in (files_readonly or {}).items():
        argv += ["--ro-bind", path, inside]  # after the job root: a link the job made there cannot redirect it
    argv += ["--chdir", job_root, "--"]
    return argv + command

"""What user code on the local backend may see: an allowlisted environment and, with bubblewrap, only its job root.

The local backend runs user code on the Airflow worker itself, next to airflow.db, airflow.cfg, the secrets file
and the worker's credentials. Two layers keep those away from it:

- the environment is built from an allowlist (locale, PATH, proxies, pip's index, GPU selection, plus the names in
  [training] local_environment), never by removing known-bad names: a secret nobody thought of does not leak;
- with [training] local_sandbox = bubblewrap (the default), `train` runs in a bubblewrap mount and PID namespace
  (Debian's `bubblewrap`, installed by `make install`). The file system it sees is an allowlist too: the system
  (/usr and a minimal /etc) and the Python that runs it read-only, its own job root read-write, its channels' cache
  entries read-only, a private /tmp; /proc and /sys with what container runtimes mask masked. AIRFLOW_HOME, the
  metadata DB, airflow.cfg, the secrets file, other jobs' roots and the worker's home are simply not there. Its PID
  namespace dies with `train`: when `train` ends (by itself, or when its launcher's lease runs out,
  operators/launch/local/launcher.py), every process the user code started goes too. The local launcher leaves out
  bubblewrap's --die-with-parent so a task retry can reattach. It gets a network namespace of the job's own
  (operators/launch/local/network.py): the worker's loopback services are not there either. /dev is a minimal one
  (the job's GPUs added).

A mount namespace hides what is not listed, but it is not a boundary against the kernel: a uid-0 process without
capabilities still passes the kernel's uid checks (a writable /proc/sys/kernel/core_pattern makes the kernel run a
program as host root). So user code also runs as a uid of its own, never 0 (operators/launch/local/isolation.py:
bubblewrap builds the sandbox as root, setpriv becomes the job's uid), under a seccomp filter (syscalls.py).
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys

import training_runtime

from operators.launch.local.syscalls import available as seccomp_problem

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
    if not problem and seccomp_problem():
        raise SandboxUnavailable(f"the local backend's sandbox cannot start: {seccomp_problem()}")
    if problem:
        raise SandboxUnavailable(
            f"the local backend's sandbox cannot start ({problem}): install Debian's bubblewrap "
            f"(`make install` does, as root) or set [training] local_sandbox = none to run user code unsandboxed")


def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), runtime_path()}
    return sorted(p for p in paths if p and os.path.isdir(p))


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


# /etc inside: what programs need to resolve names, verify TLS and load libraries; never shadow, ssh or docker keys,
# nor the worker's account list (passwd and group are the sandbox's own: account_files).
ETC_ENTRIES = ("hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf", "services", "protocols",
               "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl/certs", "ssl/openssl.cnf", "ca-certificates",
               "ca-certificates.conf", "pki/tls/certs", "localtime", "timezone", "alternatives", "os-release",
               "debian_version", "mime.types", "fonts", "bash.bashrc", "profile", "inputrc", "pip.conf")
# What container runtimes hide in /proc and /sys (runc's and Docker's masked and read-only paths).
PROC_MASKED_FILES = ("kcore", "keys", "timer_list", "timer_stats", "sched_debug", "latency_stats", "sysrq-trigger")
MASKED_DIRS = ("/proc/acpi", "/proc/asound", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap")
PROC_READ_ONLY = ("sys", "fs", "irq", "bus")
NVIDIA_PROC_GPUS = "/proc/driver/nvidia/gpus"
# Capabilities the sandbox keeps only long enough for setpriv to become the job's uid (then none are left).
SETPRIV_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")


def account_files(directory: str, uid: int, gid: int) -> dict[str, str]:
    """passwd and group naming the job's user (getpass, pip and torch look it up), written in the worker-only
    `directory`; {path on the worker: path inside}."""
    passwd = os.path.join(directory, "passwd")
    group = os.path.join(directory, "group")
    with open(passwd, "w") as f:
        f.write("root:x:0:0:root:/root:/usr/sbin/nologin\n"
                + (f"training:x:{uid}:{gid}:training job:/tmp:/bin/sh\n" if uid else "")
                + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    with open(group, "w") as f:
        f.write("root:x:0:\n" + (f"training:x:{gid}:\n" if gid else "") + "nogroup:x:65534:\n")
    return {passwd: "/etc/passwd", group: "/etc/group"}


def gpu_arguments(devices: tuple[str, ...]) -> list[str]:
    """Only the job's GPUs: their device nodes (under their own names in /dev), the driver's control nodes beside
    them, and the driver's /proc entries of those GPUs alone; no GPU at all when it has none."""
    if not devices:
        return []
    argv = []
    for device in devices:
        argv += ["--dev-bind", device, f"/dev/{os.path.basename(device)}"]
    for control in sorted(glob.glob(os.path.join(os.path.dirname(devices[0]), "nvidia[!0-9]*"))):
        argv += ["--dev-bind", control, f"/dev/{os.path.basename(control)}"]
    minors = {os.path.basename(d)[len("nvidia"):] for d in devices}
    entries = [entry for entry in sorted(glob.glob(os.path.join(NVIDIA_PROC_GPUS, "*")))
               if _device_minor(entry) in minors]
    if os.path.isdir(NVIDIA_PROC_GPUS):
        argv += ["--tmpfs", NVIDIA_PROC_GPUS]
        for entry in entries:
            argv += ["--ro-bind", entry, entry]
    return argv


def _device_minor(entry: str) -> str | None:
    try:
        with open(os.path.join(entry, "information")) as f:
            for line in f:
                if line.startswith("Device Minor:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _parent_directories(paths) -> list[str]:
    """bubblewrap makes the missing parents of a mount point 0700, root's: a job's user could not reach its own job
    root or the Python it runs. Made first, 0755, for every path bound outside the system tree."""
    argv, made = [], set()
    for path in paths:
        parts = os.path.dirname(os.path.abspath(path)).strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:depth])
            if parent in made or parent == "/" or any(_inside(parent, top) for top in ("/usr", "/etc", "/proc", "/sys",
                                                                                      "/dev")):
                continue
            made.add(parent)
            argv += ["--perms", "0755", "--dir", parent]
    return argv


def setpriv_command(command: list[str], uid: int, gid: int) -> list[str]:
    """`command` as uid:gid with no groups, no capabilities (bounding set included) and no_new_privs."""
    return [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", *command]


def bwrap_command(command: list[str], job_root: str, readonly: list[str] = (), hide: str | None = None,
                  die_with_parent: bool = True, unshare_net: bool = False, files_readonly: dict[str, str] = None,
                  status_fd: int | None = None, block_fd: int | None = None, run_as: tuple[int, int] | None = None,
                  seccomp_fd: int | None = None, gpus: tuple[str, ...] = ()) -> list[str]:
    """`command` wrapped in bubblewrap: sees the system and Python read-only, `job_root` read-write, `readonly`
    read-only; `hide` (AIRFLOW_HOME) is covered by an empty tmpfs should it lie inside the system tree.
    die_with_parent=False: the sandbox outlives its launcher (the local launcher's lease stops it instead).
    unshare_net: a network namespace of its own (operators/launch/local/network.py). files_readonly: {path on the
    worker: path inside} bound read-only (the same inode: the worker's updates show through). status_fd: bubblewrap
    writes the sandbox's pid and namespaces, then its exit code, there (JSON lines; never visible to the sandbox).
    block_fd: the command starts once something can be read from it. run_as: (uid, gid) the command runs as (a root
    worker: bubblewrap builds the sandbox as root, setpriv then becomes the job's user, as an OCI runtime does after
    its mounts); without it a non-root worker's bubblewrap maps the worker's own uid. seccomp_fd: a compiled filter
    (operators/launch/local/syscalls.py). gpus: the device nodes of the job's GPUs (gpu_arguments)."""
    argv = [shutil.which("bwrap") or "bwrap", *(["--die-with-parent"] if die_with_parent else []), "--unshare-pid",
            *(["--unshare-net"] if unshare_net else []), "--unshare-ipc", "--unshare-uts", "--new-session",
            "--cap-drop", "ALL"]
    if run_as is not None:
        for cap in SETPRIV_CAPS:
            argv += ["--cap-add", cap]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if os.path.isdir("/usr"):
        argv += ["--ro-bind", "/usr", "/usr"]
    argv += ["--tmpfs", "/etc"]
    for name in ETC_ENTRIES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "01777", "--tmpfs", "/dev/shm",
             "--ro-bind-try", "/sys", "/sys", "--perms", "01777", "--tmpfs", "/tmp"]
    for name in PROC_READ_ONLY:
        if os.path.exists(f"/proc/{name}"):
            argv += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_MASKED_FILES:
        if os.path.exists(f"/proc/{name}"):
            argv += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    for path in MASKED_DIRS:
        if os.path.isdir(path):
            argv += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
    argv += gpu_arguments(tuple(gpus))
    binds = [*_python_paths(), *readonly, job_root, *(files_readonly or {}).values()]
    argv += _parent_directories(binds)
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
    return argv + (setpriv_command(command, *run_as) if run_as is not None else list(command))

"""Build (once) the virtual environments of the peer runtimes the differential tests compare `train` with.

    python tests/runtime/peers/build.py [NAME ...]

Each peer gets its own venv (both define a console script named `train`) under
``$TRAINING_PEERS_DIR``, else ``$TOOLS_CACHE/peers``, else ``~/.cache/training-jobs/peers``,
named after the requirements file and its hash, so a changed pin builds a new one and a
second run reuses it. A venv counts only once ``.complete`` is written (a half-built one is
rebuilt); a lock file keeps two builds from racing. Standard library only.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv

HERE = os.path.dirname(os.path.abspath(__file__))
#: name -> requirements file (every dependency pinned).
PEERS = {
    "ti-containers": os.path.join(HERE, "ti-containers.txt"),
    "sagemaker-training": os.path.join(HERE, "sagemaker-training.txt"),
}


def cache_dir():
    if os.environ.get("TRAINING_PEERS_DIR"):
        return os.environ["TRAINING_PEERS_DIR"]
    tools = os.environ.get("TOOLS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "training-jobs")
    return os.path.join(tools, "peers")


def venv_dir(name):
    with open(PEERS[name], "rb") as f:
        digest = hashlib.sha256(f.read() + sys.version.encode()).hexdigest()[:12]
    return os.path.join(cache_dir(), "%s-%s" % (name, digest))


def python_of(name):
    return os.path.join(venv_dir(name), "bin", "python")


def build(name, log=print):
    """The venv of peer ``name`` (built if missing); returns its directory."""
    target = venv_dir(name)
    if os.path.exists(os.path.join(target, ".complete")):
        return target
    os.makedirs(cache_dir(), exist_ok=True)
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(target, ".complete")):
            return target  # another process built it while we waited
        started = time.monotonic()
        log("building the %s peer venv in %s (pinned in %s) ..." % (name, target, os.path.relpath(PEERS[name])))
        shutil.rmtree(target, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(target)
        # Every dependency is pinned in the file, so nothing else is resolved.
        subprocess.run(
            [os.path.join(target, "bin", "python"), "-m", "pip", "install", "--quiet", "--no-deps",
             "--disable-pip-version-check", "-r", PEERS[name]],
            check=True,
        )
        with open(os.path.join(target, ".complete"), "w") as f:
            f.write("built from %s\n" % PEERS[name])
        log("built the %s peer venv in %.0f s" % (name, time.monotonic() - started))
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="peers to build: %s (default: all)" % ", ".join(sorted(PEERS)))
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(PEERS))
    if unknown:
        parser.error("unknown peer %s: use %s" % (", ".join(unknown), ", ".join(sorted(PEERS))))
    for name in args.names or sorted(PEERS):
        print("%s: %s" % (name, build(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

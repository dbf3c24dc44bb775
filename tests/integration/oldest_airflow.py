"""The oldest Airflow 3 minor the provider supports (pyproject.toml: apache-airflow>=3.1), as a virtualenv of its own:
Airflow 3.1.8 and everything under it pinned in oldest_airflow_requirements.txt, built once (`make airflow-oldest`,
which `make test` depends on; or `python tests/integration/oldest_airflow.py build`) from the wheelhouse the Makefile
fills, under $(TOOLS_CACHE)/airflow-oldest-<hash of the pins>, so a fresh clone on the same machine reuses it.
tests/integration/test_provider_install.py installs the provider's and the runtime's wheels on top of it (a venv of
its own that sees this one's packages) and runs the training_job DAG there."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent / "oldest_airflow_requirements.txt"
AIRFLOW_VERSION = "3.1.8"


def _cache() -> Path:
    return Path(os.environ.get("TOOLS_CACHE") or Path.home() / ".cache" / "training-jobs")


def venv_dir() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:12]
    return _cache() / f"airflow-oldest-{digest}"


def site_packages() -> Path:
    """The built venv's site-packages; a clear error (what to run) when it was not built."""
    target = venv_dir()
    if not (target / ".complete").exists():
        raise RuntimeError(f"the Airflow {AIRFLOW_VERSION} venv {target} is not built: run `make airflow-oldest` "
                           f"(pip installs {REQUIREMENTS.name} from the wheelhouse, a few minutes once; `make test` "
                           "does it)")
    return Path(subprocess.run([str(target / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())


def build(log=print) -> Path:
    """Build the venv (once: it counts only when .complete is written; a lock keeps builds apart). The wheels come
    from the Makefile's wheelhouse; what it lacks is fetched into it first (`pip wheel`, the Makefile's way)."""
    target = venv_dir()
    if (target / ".complete").exists():
        return target
    wheelhouse = _cache() / "wheels"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        started = time.monotonic()
        log(f"building the Airflow {AIRFLOW_VERSION} venv in {target} (pinned in {REQUIREMENTS.name}) ...")
        shutil.rmtree(target, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(target)
        pip = [str(target / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        install = [*pip, "install", "-q", "--no-deps", "--no-index", "--find-links", str(wheelhouse),
                   "-r", str(REQUIREMENTS)]
        if subprocess.run(install, stderr=subprocess.DEVNULL).returncode != 0:
            log(f"filling the wheelhouse {wheelhouse} with what {REQUIREMENTS.name} needs (from the index)")
            subprocess.run([*pip, "wheel", "-q", "--no-deps", "--find-links", str(wheelhouse), "-w", str(wheelhouse),
                            "-r", str(REQUIREMENTS)], check=True)
            subprocess.run(install, check=True)
        (target / ".complete").write_text(f"built from {REQUIREMENTS}\n")
        log(f"built the Airflow {AIRFLOW_VERSION} venv in {time.monotonic() - started:.0f} s")
    return target


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: oldest_airflow.py build")
    build()

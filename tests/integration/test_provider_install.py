"""The provider as a team installs it (issue 49): the wheel `pip wheel` builds, installed with the runtime's wheel
into a fresh virtualenv outside the checkout, under an Airflow home of its own. Airflow finds the console and the SDK
API through the `airflow.plugins` entry points and loads each once, the three-line DAG file of docs/deploying.md
parses from the installed package, the checkout's plugins/ folder next to the installed provider registers nothing
twice, and a deployment's own `operators` package ahead on sys.path is named in one line.

The fresh venv has no copy of the dependencies: a .pth line puts the project venv's site-packages after its own (a
path a .pth adds has its own .pth files ignored; the project's own installs are left out, so they do not come along)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import site
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

import oldest_airflow

REPO = Path(__file__).resolve().parents[2]

# Run inside the fresh venv: what Airflow's plugins manager and DagBag see there, as JSON on the last line.
_PROBE = textwrap.dedent("""
    import json, sys
    OURS = ("training_jobs", "training_sdk_api")
    from importlib.metadata import entry_points
    from airflow import plugins_manager
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag
    import operators, training_jobs_plugin
    if hasattr(plugins_manager, "_get_plugins"):
        plugins, errors = plugins_manager._get_plugins()
    else:  # Airflow 3.1
        plugins_manager.ensure_plugins_loaded()
        plugins, errors = plugins_manager.plugins, plugins_manager.import_errors
    bag = DagBag(dag_folder=sys.argv[1])
    print(json.dumps({
        # Ours only: other providers of the environment (openlineage's, with the lineage extra) register plugins too.
        "entry_points": sorted(ep.name for ep in entry_points(group="airflow.plugins") if ep.name.startswith(OURS)),
        "plugins": sorted(p.name for p in plugins if p.name.startswith(OURS)),
        "plugin_errors": {k: str(v) for k, v in errors.items()},
        "operators": operators.__file__,
        "plugin_module": training_jobs_plugin.__file__,
        "dags": sorted(bag.dag_ids),
        "dag_errors": {k: str(v) for k, v in bag.import_errors.items()},
        "tasks": len(bag.dags["training_job"].tasks) if "training_job" in bag.dags else 0,
    }))
""")

THREE_LINE_DAG = "from airflow_training_jobs import training_job_dag\n\ndag = training_job_dag()\n"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv with the provider's and the runtime's wheels installed, its directory)."""
    root = tmp_path_factory.mktemp("provider-install")
    wheels = root / "wheels"
    # Built from a copy of the sources: a build writes build/ and metadata next to them, and the checkout's build/
    # holds the image builds' staging (docker/build-images.sh).
    source = root / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("operators", "plugins", "runtime"):
        shutil.copytree(REPO / name, source / name, ignore=skip)
    for name in ("pyproject.toml", "setup.cfg", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    for project in (source, source / "runtime"):
        # No build isolation: setuptools comes from the project venv (the index is not needed).
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-w", str(wheels), str(project)],
                       check=True, cwd=root, timeout=300)
    assert not list((source / "plugins").glob("*.egg-info"))  # setup.cfg: not where Airflow puts sys.path
    return _venv_with(root / "venv", *map(str, wheels.glob("*.whl"))), root


def _venv_with(venv: Path, *install: str, deps_from: list[Path] | None = None) -> Path:
    """The python of a fresh venv at `venv` with `install` (pip arguments) installed without dependencies; the
    dependencies are the packages of `deps_from` (site-packages folders; default: the project venv's)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    own_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    # The project venv's packages without its own installs of this project: their metadata (the editable install's
    # dist-info with the airflow.plugins entry points) would be a second distribution of the provider in the fresh venv.
    deps = venv / "project-deps"
    deps.mkdir()
    ours = ("airflow_training_jobs", "training_runtime", "training_sdk", "__editable__")
    for packages in deps_from or map(Path, site.getsitepackages()):
        for entry in packages.iterdir():
            if not entry.name.startswith(ours) and not entry.name.endswith(".pth") and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (own_site / "project_deps.pth").write_text(f"{deps}\n")
    # --ignore-installed: the project venv's editable installs are visible through the .pth and would count as
    # installed; it never uninstalls anything.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--ignore-installed", "--no-index", "--no-build-isolation", "--disable-pip-version-check",
                    *install], check=True, timeout=300)
    return python


def _team_env(home: Path, plugins: Path | None = None) -> dict[str, str]:
    """A team's Airflow home: its own dags/ with the three-line DAG file, no setting of the checkout's."""
    (home / "dags").mkdir(parents=True, exist_ok=True)
    (home / "dags" / "training_job.py").write_text(THREE_LINE_DAG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON"))}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
               AIRFLOW__CORE__PLUGINS_FOLDER=str(plugins or home / "plugins"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__LAZY_LOAD_PLUGINS="True")
    return env


def _probe(python: Path, home: Path, *, pythonpath: str = "", plugins: Path | None = None) -> subprocess.CompletedProcess:
    env = _team_env(home, plugins)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    (home / "plugins").mkdir(exist_ok=True)
    return subprocess.run([str(python), "-c", _PROBE, str(home / "dags")], cwd=home, env=env,
                          capture_output=True, text=True, timeout=300)


def _report(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_installed_provider_brings_its_plugins_and_dag_template(installed):
    python, root = installed
    report = _report(_probe(python, root / "team-home"))
    venv = str(root / "venv")
    assert report["entry_points"] == ["training_jobs", "training_sdk_api"]
    assert report["plugins"] == ["training_jobs", "training_sdk_api"], report["plugin_errors"]
    assert report["plugin_errors"] == {}
    # Imported from the installed wheel, not from the checkout.
    assert report["operators"].startswith(venv) and report["plugin_module"].startswith(venv)
    assert report["dag_errors"] == {}
    assert report["dags"] == ["training_job"] and report["tasks"] > 5


def test_checkout_deployment_registers_each_plugin_once(installed):
    """The checkout's own deployment: the checkout installed editable (`make install`) and its plugins/ folder as
    Airflow's plugins folder, on sys.path. Each plugin is registered once, from the checkout, and nothing is reported
    as an import error (a second copy of the metadata in plugins/, or the folder's files loaded as plugins too, would
    register each twice)."""
    _, root = installed
    python = _venv_with(root / "editable-venv", "-e", str(REPO), "-e", str(REPO / "runtime"))
    report = _report(_probe(python, root / "checkout-home", plugins=REPO / "plugins"))
    assert report["plugins"] == ["training_jobs", "training_sdk_api"]
    assert report["plugin_errors"] == {}
    assert report["operators"] == str(REPO / "operators" / "__init__.py")
    assert report["plugin_module"] == str(REPO / "plugins" / "training_jobs_plugin.py")


def test_a_deployments_own_operators_package_is_named_in_one_line(installed):
    python, root = installed
    home = root / "clash-home"
    theirs = home / "team_code" / "operators"
    theirs.mkdir(parents=True)
    (theirs / "__init__.py").write_text("")
    (theirs / "my_hook.py").write_text("")
    result = _probe(python, home, pythonpath=str(home / "team_code"))
    # Airflow loads the provider's entry point in every command, so the clash stops it there, with that one line
    # (not "No module named 'operators.provider_info'").
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the package 'operators' found at ") and str(theirs) in last, result.stderr
    assert "is not the training-jobs platform's" in last and "rename that package" in last


TRAIN_SCRIPT = textwrap.dedent("""
    import json, os, sys
    print("epoch=0 loss=0.5", flush=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"python": sys.version.split()[0], "epochs": int(os.environ["SM_HP_EPOCHS"])}, f)
""")


@pytest.mark.slow
def test_oldest_supported_airflow_runs_the_training_job_to_a_published_model(installed):
    """pyproject.toml declares Airflow 3.1 as the oldest supported: on Airflow 3.1.8 (its own venv, `make
    airflow-oldest`), the provider's and the runtime's wheels load both plugins, and one `airflow dags test
    training_job` on the local backend publishes the model."""
    _, root = installed
    python = _venv_with(root / "venv-airflow-oldest", *map(str, (root / "wheels").glob("*.whl")),
                        deps_from=[oldest_airflow.site_packages()])
    home = root / "oldest-home"
    report = _report(_probe(python, home))
    assert report["plugins"] == ["training_jobs", "training_sdk_api"], report["plugin_errors"]
    assert report["dag_errors"] == {} and report["dags"] == ["training_job"]

    env = _team_env(home)
    env["AIRFLOW__TRAINING__WORKSPACE"] = str(home / "workspace")
    airflow = [str(python), "-m", "airflow"]
    version = subprocess.run([*airflow, "version"], env=env, cwd=home, capture_output=True, text=True, timeout=300)
    assert version.stdout.strip() == oldest_airflow.AIRFLOW_VERSION, version.stderr[-2000:]
    migrate = subprocess.run([*airflow, "db", "migrate"], env=env, cwd=home, capture_output=True, text=True,
                             timeout=600)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    code = home / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN_SCRIPT)
    conf = {"job_name": "oldest-airflow", "backend": "local", "source_dir": str(code), "entry_point": "train.py",
            "hyperparameters": {"epochs": 1}, "output_path": str(home / "models")}
    run = subprocess.run([*airflow, "dags", "test", "training_job", "--conf", json.dumps(conf)], env=env, cwd=home,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    model = home / "models" / "oldest-airflow" / "output" / "model.tar.gz"
    with tarfile.open(model) as tar:
        assert json.load(tar.extractfile("model.json")) == {"python": platform.python_version(), "epochs": 1}

"""The project as an Airflow provider: its provider info is valid for Airflow, documents every [training] option
of the shipped airflow.cfg, and Airflow's own CLI lists the provider and the [training] sections."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from operators.provider_info import get_provider_info

REPO = Path(__file__).resolve().parents[2]


def test_provider_info_is_valid_for_airflow():
    import jsonschema
    from airflow import providers_manager  # noqa: F401

    import airflow

    schema_path = Path(airflow.__file__).parent / "provider_info.schema.json"
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))


def test_every_training_option_of_airflow_cfg_is_described():
    shipped = configparser.ConfigParser(interpolation=None)
    shipped.read(REPO / "airflow.cfg")
    config = get_provider_info()["config"]
    for section in ("training", "training.kubernetes", "training.docker"):
        assert config[section]["description"]
        options = config[section]["options"]
        assert set(shipped[section]) == set(options), section
        assert all(option["description"] for option in options.values())


# The readers of [training*]: operators/settings.py ([training] and the typed getters) and each backend's section.
SETTINGS_READERS = ("operators/settings.py", "operators/launch/kubernetes/settings.py",
                    "operators/launch/docker/settings.py")


def test_every_setting_the_code_reads_is_described():
    """Each key the settings readers read through the typed getters has a description and a default."""
    import ast

    config = get_provider_info()["config"]
    read = set()
    for reader in SETTINGS_READERS:
        for function in ast.parse((REPO / reader).read_text()).body:
            if not isinstance(function, ast.FunctionDef):
                continue
            section = next((node.value.value for node in ast.walk(function) if isinstance(node, ast.Assign)
                            and [getattr(t, "id", None) for t in node.targets] == ["s"]), None)
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and getattr(call.func, "id", "").startswith("get_") \
                        and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant):
                    first = call.args[0]
                    read.add((section if isinstance(first, ast.Name) else first.value, call.args[1].value))
    assert len(read) > 30, read  # the parse found the readers
    missing = sorted(f"[{section}] {key}" for section, key in read if key not in config[section]["options"])
    assert not missing, f"read by {', '.join(SETTINGS_READERS)} but not in operators/provider_info.py: {missing}"


def test_extra_links_are_every_link_the_stages_show():
    import importlib

    from operators.stages.links import ALL_LINKS

    links = [getattr(importlib.import_module(module), name)
             for module, _, name in (path.rpartition(".") for path in get_provider_info()["extra-links"])]
    assert sorted(link.__name__ for link in links) == sorted(link.__name__ for link in ALL_LINKS)


def test_pyproject_registers_the_entry_point():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # Through plugins/airflow_training_jobs.py, which checks first that `operators` is ours.
    assert project["entry-points"]["apache_airflow_provider"] == {
        "provider_info": "airflow_training_jobs:get_provider_info"}
    from airflow_training_jobs import get_provider_info as entry

    assert entry is get_provider_info
    assert project["name"] == get_provider_info()["package-name"]


ENTRY_POINT = "airflow_training_jobs:get_provider_info"


@pytest.fixture(scope="module")
def provider_env(tmp_path_factory) -> dict[str, str]:
    """The environment of an Airflow that has this project installed with its entry point: the installed one after
    `make install`; where the installed metadata predates the entry point (a shared dev venv), a dist-info overlay
    on PYTHONPATH gives Airflow's real discovery the same entry point."""
    from importlib.metadata import entry_points

    env = dict(os.environ)
    if not any(e.value == ENTRY_POINT for e in entry_points(group="apache_airflow_provider")):
        site = tmp_path_factory.mktemp("site")
        dist = site / "airflow_training_jobs-0.1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: airflow-training-jobs\nVersion: 0.1.0\n")
        (dist / "entry_points.txt").write_text(
            f"[apache_airflow_provider]\nprovider_info = {ENTRY_POINT}\n")
        env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), str(REPO / "plugins"), env.get("PYTHONPATH", "")])
    return env


def airflow_cli(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_airflow_lists_the_provider_and_documents_the_training_sections(provider_env):
    providers = json.loads(airflow_cli(provider_env, "providers", "list", "--output", "json"))
    assert "airflow-training-jobs" in {p["package_name"] for p in providers}
    listing = airflow_cli(provider_env, "config", "list", "--include-descriptions", "--section",
                          "training.kubernetes")
    assert "[training.kubernetes]" in listing and "Namespace of training Jobs." in listing
    listing = airflow_cli(provider_env, "config", "list", "--include-descriptions", "--section", "training")
    assert "# Local paths (plain or file://) a job spec may read or write" in listing

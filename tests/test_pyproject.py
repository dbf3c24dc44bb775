"""pyproject.toml declares every third-party package operators/ and plugins/ import (the provider's code): a module
imported at the top of a file needs a core dependency; one imported only inside a function (lazy) may be an extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
OURS = {"operators", "training_console", "training_runtime", "airflow_training_jobs", "secret_reference_check",
        "training_jobs_plugin", "training_sdk_api", "approval_check"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imports() -> dict[str, set[str]]:
    """{"top" | "lazy": the top-level or airflow.providers.<x> import names} of operators/ and plugins/."""
    found = {"top": set(), "lazy": set()}
    for path in [*(REPO / "operators").rglob("*.py"), *(REPO / "plugins").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        in_function = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for node in ast.walk(fn) if node is not fn}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] in sys.stdlib_module_names or parts[0] in OURS:
                    continue
                if parts[:2] == ["airflow", "providers"]:  # cncf.kubernetes, common.compat: two-part names
                    key = ".".join(parts[:4] if parts[2] in ("cncf", "common") else parts[:3])
                else:
                    key = parts[0]
                found["lazy" if id(node) in in_function else "top"].add(key)
    return found


def _distribution(module: str) -> str:
    if module.startswith("airflow.providers."):
        return "apache-airflow-providers-" + "-".join(module.split(".")[2:]).replace("_", "-")
    return packages_distributions()[module][0].lower().replace("_", "-")


def test_every_import_is_declared():
    core = {_name(r) for r in PROJECT["dependencies"]}
    extras = {_name(r) for group in PROJECT["optional-dependencies"].values() for r in group}
    imports = _imports()
    assert "kubernetes_asyncio" in imports["top"] | imports["lazy"]  # the scan sees the code (can fail)
    missing = {}
    for kind, modules in imports.items():
        allowed = core if kind == "top" else core | extras
        for module in modules:
            dist = _distribution(module)
            if dist in ("apache-airflow-core", "apache-airflow-task-sdk"):
                dist = "apache-airflow"
            # A backend's modules import its extra's packages at the top; the registry imports them lazily.
            in_backend_extra = dist in extras
            if dist not in allowed and not (kind == "top" and in_backend_extra):
                missing[module] = dist
    assert missing == {}, f"imported but not declared in pyproject.toml: {missing}"


def test_optional_parts_are_extras_not_core():
    core = {_name(r) for r in PROJECT["dependencies"]}
    for optional in ("apache-airflow-providers-cncf-kubernetes", "kubernetes-asyncio", "docker", "mlflow-skinny",
                     "pyseccomp", "celery"):
        assert optional not in core

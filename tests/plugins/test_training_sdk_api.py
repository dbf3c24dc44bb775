"""The SDK's plugin loads, mounts its app at its own prefix, and costs task processes nothing (the upload and metrics
endpoints themselves are exercised against the real API server in tests/integration/test_sdk.py)."""

import os
import subprocess
import sys


def test_airflow_loads_the_sdk_plugin_with_its_app(repo_root):
    from airflow import plugins_manager

    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    assert "training_sdk_api" in info, plugins_manager.get_import_errors()
    assert [a["url_prefix"] for a in info["training_sdk_api"]["fastapi_apps"]] == ["/training-sdk"]


def test_loading_the_plugin_does_not_build_the_app(repo_root):
    code = ("import sys, training_sdk_api; "
            "assert 'fastapi' not in sys.modules and 'airflow.api_fastapi.core_api.security' not in sys.modules")
    path = os.pathsep.join([str(repo_root / "plugins"), str(repo_root), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 0, result.stderr[-2000:]

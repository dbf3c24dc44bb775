"""The SDK's local mode reaches the platform through operators/local_api.py only: every name of its API imports on
a machine without Airflow, and the SDK uses no other platform module."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_name_of_the_local_api_imports_without_airflow():
    program = textwrap.dedent('''
        import sys
        sys.modules["airflow"] = None  # any "import airflow..." now raises ImportError
        from operators import local_api
        missing = [name for name in local_api.__all__ if not hasattr(local_api, name)]
        print("API", sorted(local_api.__all__), "MISSING", missing)
    ''')
    path = os.pathsep.join([str(REPO), str(REPO / "runtime"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", program], env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MISSING []" in done.stdout
    assert "'validate_spec'" in done.stdout and "'LocalLauncherHook'" in done.stdout


def test_the_sdk_imports_no_platform_module_but_the_local_api():
    imported = set()
    for path in (REPO / "sdk" / "training_sdk").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "operators":
                imported |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names if alias.name.split(".")[0] == "operators"}
    assert imported == {"operators.local_api"}

"""operators/storage/: one sub-package per engine beside the engine-neutral layer (issue 39). Neither engine imports
the other (both run on the connection's neutral client, storage.remote, and share the multipart safety net,
storage.leftover_uploads), and the neutral modules the engines build on import no engine (only RemoteStore, the
listing and the hook choose between them)."""

from __future__ import annotations

import ast
from pathlib import Path

STORAGE = Path(__file__).resolve().parents[3] / "operators" / "storage"
# The neutral modules that choose an engine; every other neutral module is below both engines.
CHOOSERS = {"hook", "stores", "listing"}


def _imported(path: Path) -> set[str]:
    """The operators.storage modules `path` imports, lazily too, but not under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("operators.storage"):
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("operators.storage"))
        todo.extend(ast.iter_child_nodes(node))
    return found


def _engine(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[2] in ("botocore", "obstore") else None


def test_neither_engine_imports_the_other():
    for engine, other in (("botocore", "obstore"), ("obstore", "botocore")):
        for path in (STORAGE / engine).glob("*.py"):
            assert not [m for m in _imported(path) if _engine(m) == other], f"{engine}/{path.name}"


def test_the_neutral_modules_below_the_engines_import_no_engine():
    neutral = [p for p in STORAGE.glob("*.py") if p.stem not in CHOOSERS and p.stem != "__init__"]
    assert {p.stem for p in neutral} >= {"location", "errors", "transfers", "retries", "progress", "addressing",
                                         "remote", "remote_retries", "leftover_uploads"}
    for path in neutral:
        assert not [m for m in _imported(path) if _engine(m)], path.name


def test_the_old_flat_engine_modules_are_gone():
    old = ["client", "downloads", "uploads", "stream", "part_queue", "obstore_store", "obstore_listing",
           "obstore_downloads", "obstore_uploads"]
    assert [name for name in old if (STORAGE / f"{name}.py").exists()] == []

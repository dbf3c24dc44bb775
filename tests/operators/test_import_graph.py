"""The import graph of operators/: no cycles, and backends stay apart (the issue-10 layering rules).

Imports are read from the source (every `import`/`from ... import`, also inside functions: a lazy import is still
a dependency), so the test sees what Python would only find when that code path runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operators"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from operators.launch import base` imports the submodule; `from x import Name` the module x.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            while target and target not in known:  # `import operators.a.b` -> the deepest module that exists
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by a depth-first search (one per back edge)."""
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _is_package_init_edge(src: str, dst: str) -> bool:
    # A package's __init__ re-exporting its submodules (operators.stages) is not a cycle of the code itself.
    return dst.startswith(src + ".")


def test_the_checker_finds_a_cycle_and_a_forbidden_import():
    """The helpers themselves: a graph with a cycle is reported, a clean one is not."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert _reachable({"docker": {"x"}, "x": {"kubernetes"}}, "docker") == {"x", "kubernetes"}


def test_operators_has_no_import_cycles():
    graph = {src: {dst for dst in dsts if not _is_package_init_edge(src, dst)} for src, dsts in import_graph().items()}
    assert _cycles(graph) == []


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    # launch_training imports the registry inside a method: still an edge.
    assert "operators.launch.registry" in graph["operators.stages.launch_training"]
    assert "operators.launch.base" in graph["operators.launch.docker.launcher"]


@pytest.mark.parametrize("module", ["operators.launch.docker.launcher"])
def test_docker_backend_reaches_no_kubernetes_module(module):
    graph = import_graph()
    assert module in graph
    kube = sorted(m for m in _reachable(graph, module) if "kubernetes" in m)
    assert kube == [], f"{module} imports Kubernetes modules {kube}"


def test_no_backend_imports_another_and_the_base_imports_none():
    graph = import_graph()
    backends = {"operators.launch.local.launcher", "operators.launch.docker.launcher",
                "operators.launch.kubernetes.launcher"}
    for backend in backends:
        assert not (_reachable(graph, backend) & (backends - {backend})), backend
    for base in ("operators.launch.base", "operators.launch.registry", "operators.launch.outcome",
                 "operators.launch.log_stream"):
        assert not (_reachable(graph, base) & backends), f"{base} imports a backend"


def test_triggers_hold_only_the_waiting_loop():
    graph = import_graph()
    trigger = "operators.triggers.kubernetes_job"
    assert "operators.launch.kubernetes.launcher" not in _reachable(graph, trigger)
    assert len((PACKAGE / "triggers" / "kubernetes_job.py").read_text().splitlines()) < 150


LAUNCH_LAYER = [
    "launch/base.py", "launch/registry.py", "launch/outcome.py", "launch/log_stream.py",
    "launch/local/launcher.py", "launch/kubernetes/launcher.py", "launch/kubernetes/watch.py",
    "launch/kubernetes/api.py", "launch/kubernetes/pods.py", "triggers/kubernetes_job.py", "settings.py",
    "stages/launch_training.py", "launch/names.py", "launch/container_env.py",
]


@pytest.mark.parametrize("path", LAUNCH_LAYER)
def test_launch_layer_modules_stay_small(path):
    # A guard against a module growing into a second concern, not a target to split for: the Kubernetes watch and
    # launcher grew with Kueue's queue lines and suspended Jobs (issue 28); issue 29 moved them into launch/kubernetes/.
    assert len((PACKAGE / path).read_text().splitlines()) <= 460

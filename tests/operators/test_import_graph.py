"""The import graph of operators/: no cycles, backends stay apart (issue 10), and the package boundaries of issue 29:
jobspec/, launch/ and cache/ import no Airflow at module level and nothing from pipelines/ or stages/.

Imports are read from the source (every `import`/`from ... import`, also inside functions: a lazy import is still
a dependency), so the test sees what Python would only find when that code path runs.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
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


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _module_level_nodes(tree: ast.Module):
    """The statements Python runs on import: the module body and the blocks nested in it (try, if, with), but no
    function or class body's function, and not `if TYPE_CHECKING:`."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or _is_type_checking(node):
            continue
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))


def _imports(path: Path, name: str, known: set[str], module_level: bool = False) -> set[str]:
    """The operators modules `name` imports; with module_level, only those imported when it is imported (also
    `airflow`, as the name "airflow", for any import of an Airflow package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in (_module_level_nodes(tree) if module_level else ast.walk(tree)):
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
            if module_level and target.split(".")[0] == "airflow":
                found.add("airflow")
                continue
            while target and target not in known:  # `import operators.a.b` -> the deepest module that exists
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(module_level: bool = False) -> dict[str, set[str]]:
    """Every operators module -> the operators modules it imports (also inside functions: a lazy import is still a
    dependency); with module_level, only what importing it runs, plus "airflow" where that imports Airflow."""
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(path, name, known, module_level) for name, path in modules.items()}
    if module_level:  # importing operators.a.b runs operators/__init__.py and operators/a/__init__.py first
        for name in graph:
            parents = name.split(".")[:-1]
            graph[name] |= {".".join(parents[:i]) for i in range(1, len(parents) + 1)} & known
    return graph


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


def _in_package(module: str, package: str) -> bool:
    return module == f"operators.{package}" or module.startswith(f"operators.{package}.")


def test_the_module_level_graph_skips_function_bodies_and_type_checking_blocks(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import operators.settings\n"
        "try:\n    from airflow.sdk import Variable\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from operators.jobspec.model import JobSpec\n"
        "def later():\n    from operators.launch import base\n"
    )
    known = {"operators.settings", "operators.jobspec.model", "operators.launch.base"}
    assert _imports(source, "m", known, module_level=True) == {"operators.settings", "airflow"}
    assert _imports(source, "m", known) == known


# What builds on the launch layer, the spec and the cache: they never import it back.
UPPER_PACKAGES = ("pipelines", "stages")
# The Airflow hooks of the launch layer (BaseHook subclasses, each owning a connection) and its trigger (a
# BaseTrigger): importing them imports Airflow, by design. Nothing else in jobspec/, launch/ or cache/ may, so the SDK's local mode and a DAG file's parse
# can import those modules without Airflow.
AIRFLOW_HOOK_MODULES = {"operators.launch.docker.launcher", "operators.launch.kubernetes.launcher",
                        "operators.launch.kubernetes.trigger"}


@pytest.mark.parametrize("package", ["jobspec", "launch", "cache", "engine"])
def test_jobspec_launch_and_cache_import_no_airflow_at_module_level(package):
    graph = import_graph(module_level=True)
    modules = sorted(m for m in graph if _in_package(m, package) and m not in AIRFLOW_HOOK_MODULES)
    assert modules
    offenders = {}
    for module in modules:
        reached = {module} | _reachable(graph, module)
        via = sorted(m for m in reached if "airflow" in graph.get(m, ()))
        if via:
            offenders[module] = via
    assert offenders == {}, f"importing these imports Airflow (through the modules listed): {offenders}"


@pytest.mark.parametrize("package", ["jobspec", "launch", "cache", "engine"])
def test_jobspec_launch_and_cache_import_nothing_from_pipelines_or_stages(package):
    graph = import_graph()
    for module in (m for m in graph if _in_package(m, package)):
        upper = sorted(m for m in _reachable(graph, module) if any(_in_package(m, u) for u in UPPER_PACKAGES))
        assert upper == [], f"{module} imports {upper}"


def _airflow_imports(path: Path) -> list[int]:
    """The lines of every import of an Airflow package in `path`, at module level or inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    return sorted(node.lineno for node in ast.walk(tree)
                  if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "airflow" for a in node.names))
                  or (isinstance(node, ast.ImportFrom) and not node.level
                      and (node.module or "").split(".")[0] == "airflow"))


def test_the_engine_imports_no_airflow_even_lazily():
    """The job engine (operators/engine/) is plain Python: the cluster's step and the SDK's local mode run it without
    Airflow; only its adapters (operators/stages/) know Airflow."""
    found = {str(p.relative_to(ROOT)): _airflow_imports(p) for p in sorted((PACKAGE / "engine").rglob("*.py"))}
    assert found, "operators/engine/ has no modules"
    offenders = {path: lines for path, lines in found.items() if lines}
    assert offenders == {}


def test_the_airflow_import_finder_finds_one(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import os\ndef f():\n    from airflow.sdk import DAG\n    import airflow\n")
    assert _airflow_imports(source) == [3, 4]


BACKEND_PACKAGES = ("launch.local", "launch.docker", "launch.kubernetes")
# The storage engines, like the backends: both run on the connection's neutral client (storage.remote).
STORAGE_ENGINES = ("storage.botocore", "storage.obstore")


@pytest.mark.parametrize("siblings, package", [(group, package) for group in (BACKEND_PACKAGES, STORAGE_ENGINES)
                                               for package in group])
def test_no_backend_or_storage_engine_reaches_a_sibling(siblings, package):
    graph = import_graph()
    modules = [m for m in graph if _in_package(m, package)]
    assert modules
    for module in modules:
        others = sorted(m for m in _reachable(graph, module)
                        if any(_in_package(m, sibling) for sibling in siblings if sibling != package))
        assert others == [], f"{module} imports a sibling's {others}"


def test_a_backend_module_outside_its_folder_is_found():
    """The boundary helpers on a made-up graph: a docker module reaching a kubernetes one through a shared module."""
    graph = {"operators.launch.docker.x": {"operators.launch.base"},
             "operators.launch.base": {"operators.launch.kubernetes.y"}}
    reached = _reachable(graph, "operators.launch.docker.x")
    assert any(_in_package(m, "launch.kubernetes") for m in reached)
    assert not _in_package("operators.launch.kubernetes_extra", "launch.kubernetes")


def test_the_hooks_grab_bag_is_gone():
    # A class called a hook is an Airflow hook owning a connection, kept beside what it is for (issue 29).
    assert not (PACKAGE / "hooks").exists()


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


def test_the_trigger_holds_only_the_waiting_loop_and_no_launcher_imports_it():
    # As in Airflow's providers: the operator builds the trigger (operators/launch/registry.py trigger_for, from the
    # launcher's primitives), the trigger may use the backend's modules, never the reverse.
    graph = import_graph()
    trigger = "operators.launch.kubernetes.trigger"
    assert "operators.launch.kubernetes.launcher" not in _reachable(graph, trigger)
    assert [m for m in graph if trigger in _reachable(graph, m)] == []
    assert len((PACKAGE / "launch" / "kubernetes" / "trigger.py").read_text().splitlines()) < 150


# The layers of operators/, top to bottom: a package imports only itself and the packages of the layers below its
# own (not its neighbours in the same layer). A top-level module (settings.py) is a package of its own; airflow_compat.py
# (what moved between Airflow minors) imports only Airflow.
LAYERS = (
    ("pipelines", "local_api"),
    ("stages",),
    ("engine",),
    ("launch",),
    ("lineage",),  # the run's lineage record: built from the spec, kept in the job's state (issue 50)
    ("state", "tuning"),
    ("cache", "staging", "tracking"),
    ("jobspec",),
    ("storage", "console_urls"),
    ("settings",),
    ("fs", "quantities", "stage_names", "log_masking", "step_process", "job_outputs"),
    ("provider_info", "__init__"),
    ("airflow_compat",),
)


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'<module> -> <module>' for every import of a package of the same or a higher layer than the importer's."""
    layer = {package: depth for depth, packages in enumerate(LAYERS) for package in packages}
    found = []
    for src, dsts in sorted(graph.items()):
        for dst in sorted(dsts):
            a, b = _package_of(src), _package_of(dst)
            if a != b and layer[b] <= layer[a]:
                found.append(f"{src} -> {dst}")
    return found


def package_figures(graph: dict[str, set[str]]) -> dict[str, object]:
    """Modules per package, imports between packages, upward ones (the figures the closing note of issue 39 gives)."""
    modules: dict[str, int] = {}
    for module in graph:
        modules[_package_of(module)] = modules.get(_package_of(module), 0) + 1
    between = sum(1 for src, dsts in graph.items() for dst in dsts if _package_of(src) != _package_of(dst))
    return {"modules": modules, "imports_between_packages": between, "upward": len(upward_imports(graph))}


def test_every_package_has_a_layer():
    assert {_package_of(m) for m in import_graph()} <= {p for layer in LAYERS for p in layer}


def test_imports_point_down_the_layers():
    graph = import_graph()
    assert upward_imports(graph) == [], package_figures(graph)


def test_the_layer_check_finds_an_upward_or_sideways_import():
    graph = {"operators.jobspec.model": {"operators.launch.base"}, "operators.launch.base": {"operators.jobspec.model"},
             "operators.cache.views": {"operators.staging.code"}, "operators.stages.base": {"operators.stages.links"}}
    assert upward_imports(graph) == ["operators.cache.views -> operators.staging.code",
                                     "operators.jobspec.model -> operators.launch.base"]


# Every module of the launch layer (its base, the three backends, the trigger) and the stage that drives it.
LAUNCH_LAYER = sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "launch").rglob("*.py")) + [
    "settings.py", "stages/launch_training.py",
]


@pytest.mark.parametrize("path", LAUNCH_LAYER)
def test_launch_layer_modules_stay_small(path):
    # A guard against a module growing into a second concern, not a target to split for: the Kubernetes watch and
    # launcher grew with Kueue's queue lines and suspended Jobs (issue 28); issue 29 moved them into launch/kubernetes/;
    # issue 48 split them and the local launcher by concern (pod_logs; host_processes, supervision, job_result).
    assert len((PACKAGE / path).read_text().splitlines()) <= 460


# A function-local import says why it is not at the top of its module: `lazy:` in a comment on its line, in the
# comments just above it (other imports may stand between), or in the comments that open its function (issue 39).
# The reasons: a heavy library kept out of a DAG file's parse and the SDK's local mode, an optional dependency,
# Airflow kept out of launch/ outside its hooks, an import cycle.
LAZY_MARKER = "lazy:"
# Beyond operators/, the rule covers the code Airflow and users import too (issue 48): the plugins (every Airflow
# process loads them; the console is built on first read in the API server), the SDK and the training runtime.
LAZY_RULE_FOLDERS = (ROOT / "plugins", ROOT / "sdk" / "training_sdk", ROOT / "runtime" / "training_runtime")


def function_local_imports(tree: ast.Module) -> list[tuple[ast.stmt, ast.AST]]:
    """(import, the innermost function around it) for every import inside a function."""
    found = []

    def visit(node: ast.AST, function: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if function is not None and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, function))
            visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function)

    visit(tree, None)
    return found


def _function_opening_lines(function: ast.AST) -> range:
    """The lines before the function's first statement (after its docstring, if it has one)."""
    body = function.body
    has_docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1
    start = body[0].end_lineno + 1 if has_docstring else function.lineno + 1
    return range(start, body[1 if has_docstring else 0].lineno)


def unmarked_local_imports(source: str) -> list[int]:
    """The line of every function-local import of `source` without a `lazy:` comment."""
    lines = source.splitlines()
    tree = ast.parse(source)
    import_lines = {line for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for line in range(node.lineno, node.end_lineno + 1)}

    def is_comment(line: int) -> bool:
        return lines[line - 1].strip().startswith("#")

    def marked(node: ast.stmt, function: ast.AST) -> bool:
        if any(LAZY_MARKER in lines[line - 1] for line in range(node.lineno, node.end_lineno + 1)):
            return True
        line = node.lineno - 1
        while line >= 1 and (line in import_lines or is_comment(line)):
            if is_comment(line) and LAZY_MARKER in lines[line - 1]:
                return True
            line -= 1
        return any(is_comment(line) and LAZY_MARKER in lines[line - 1] for line in _function_opening_lines(function))

    return [node.lineno for node, function in function_local_imports(tree) if not marked(node, function)]


def test_the_marker_check_finds_an_import_without_its_reason():
    source = textwrap.dedent("""\
        import os


        def marked_on_its_line():
            import json  # lazy: a made-up reason


        def marked_above_a_group():
            x = 1
            # lazy: a made-up reason
            from a import b
            from c import d
            return x


        def marked_at_the_start():
            \"\"\"Doc.\"\"\"
            # lazy: a made-up reason
            x = 1
            import e
            return x


        def unmarked():
            # a comment, but no reason
            import f
            y = 2
            import g  # the lazy import
    """)
    assert unmarked_local_imports(source) == [26, 28]


def test_every_function_local_import_says_why_it_is_local():
    """Function-local imports only where they keep a DAG file's parse or the SDK's local mode from importing a
    heavy library (or Airflow), for an optional dependency, or to break a cycle; each one's comment says which."""
    unmarked = {}
    paths = [*PACKAGE.rglob("*.py"), *(path for folder in LAZY_RULE_FOLDERS for path in folder.rglob("*.py"))]
    assert any(p.parent.name == "training_console" for p in paths) and any("training_sdk" in p.parts for p in paths)
    for path in sorted(paths):
        lines = unmarked_local_imports(path.read_text())
        if lines:
            unmarked[str(path.relative_to(ROOT))] = lines
    assert unmarked == {}, f"function-local imports without a '# {LAZY_MARKER} <why>' comment (file: lines)"


# What a DAG file's parse must not import: the clients of the backends, storage and tracking belong to the tasks.
# The kubernetes client too: the parse reads [training]'s quantity settings, whose parser (operators/quantities.py)
# loads without the package (issue 48: it was ~0.6 s of every parse).
HEAVY_LIBRARIES = ("kubernetes", "kubernetes_asyncio", "botocore", "boto3", "s3transfer", "obstore", "awscrt", "docker", "mlflow",
                   "torch")


def test_parsing_the_dags_imports_no_heavy_library(tmp_path):
    code = textwrap.dedent(f"""
        import json, runpy, sys, pathlib
        for path in sorted(pathlib.Path({str(ROOT / 'dags')!r}).glob('*.py')):
            runpy.run_path(str(path))
        print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY_LIBRARIES)!r}))))
    """)
    # plugins/: the distribution installs airflow_training_jobs (what the DAG files import) from there.
    env = {"AIRFLOW_HOME": str(tmp_path), "PYTHONPATH": f"{ROOT}:{ROOT / 'plugins'}:{ROOT / 'runtime'}",
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []

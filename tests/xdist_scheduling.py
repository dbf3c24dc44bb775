"""How `make test` spreads test modules over xdist workers (-n N; tests/conftest.py uses it)."""

from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A module's tests stay on one worker (its module fixtures start once), and every module that needs the real node
# runs on that one worker too (one real node at a time: its image store holds the multi-GB training images). Other
# session fixtures (MinIO, kwok clusters, PostgreSQL, Airflow) start per worker, on free ports and in private
# directories. xdist's own --dist loadgroup can't do this under pytest 9 (it renames items through an attribute
# pytest 9 no longer reads), hence a scheduler of ours.
_REAL_NODE_FIXTURES = ("real_cluster", "real_namespace", "real_admin")


def _real_node_modules() -> set[str]:
    modules = set()
    for path in (REPO / "tests").rglob("test_*.py"):
        text = path.read_text(errors="replace")
        if "real_node" in path.name or any(name in text for name in _REAL_NODE_FIXTURES):
            modules.add(path.relative_to(REPO).as_posix())
    return modules


# Longest first: xdist hands out modules by their number of tests, so the long one-test modules (a served Airflow
# and a browser, 20 runs of load) came last and one worker ran them alone for minutes at the end of the suite.
# Seconds per module, estimated from the 60 slowest of the 2026-12-02 `make test` (--durations, summed per module;
# the real-node group over its modules) and the rest of its tests at ~10 s; other modules count SECONDS_PER_TEST a test. Only the order depends on these: a wrong
# figure costs time, never a test. The real-node group (~25 min) is not the whole run's critical path: its worker
# goes on with other modules when it is done, so the two workers end within a module of each other and the
# integration phase takes about half the suite's summed test time; a second saved anywhere saves about half a second.
SECONDS_PER_TEST = 20
MEASURED_SECONDS = {
    "real-node": 1500,
    "tests/integration/test_production_deployment.py": 400,
    "tests/integration/test_kubernetes_kueue.py": 300,
    "tests/integration/test_sdk.py": 300,
    "tests/integration/test_ui_browser.py": 250,
    "tests/integration/test_load.py": 200,
    "tests/integration/test_retraining_approval.py": 200,
    "tests/integration/test_kubernetes_local_cluster_dag.py": 200,
    "tests/integration/test_triggering.py": 200,
    "tests/integration/test_compare_browser.py": 150,
    "tests/integration/test_ui_server.py": 150,
    "tests/integration/test_secrets_dag.py": 120,
    "tests/integration/test_mlflow_tracking_dag.py": 100,
}


class LongestFirst(OrderedDict):
    """xdist's work queue (scope -> its tests), popped heaviest first instead of in insertion order."""

    def popitem(self, last: bool = True):
        if last or not self:
            return super().popitem(last)
        scope = max(self, key=lambda s: MEASURED_SECONDS.get(s, SECONDS_PER_TEST * len(self[s])))
        return scope, self.pop(scope)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    real_node = _real_node_modules()

    class ModuleScheduling(LoadScopeScheduling):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.workqueue = LongestFirst()

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return "real-node" if module in real_node else module

        def remove_node(self, node):
            """A crashed worker's test is reported failed and is not run again (xdist's scope scheduler re-runs it
            on the next worker, which crashes the same way, each leaving its fixtures' processes behind); the rest
            of its module goes to the next worker."""
            workload = self.assigned_work.pop(node)
            pending = [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]
            if not pending:
                return None
            crashed = pending[0]
            workload[self._split_scope(crashed)][crashed] = True
            self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

    return ModuleScheduling(config, log)


# The tests running right now (on the workers, as the controller hears of them), named when the run is interrupted
# (`make test` interrupts integration tests that run past INTEGRATION_LIMIT).
_running: dict[str, float] = {}


def pytest_runtest_logstart(nodeid, location):
    _running[nodeid] = time.monotonic()


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        _running.pop(report.nodeid, None)


def pytest_keyboard_interrupt(excinfo):
    now = time.monotonic()
    for nodeid, started in _running.items():
        print(f"\ninterrupted while running {nodeid} (for {now - started:.0f}s)", flush=True)

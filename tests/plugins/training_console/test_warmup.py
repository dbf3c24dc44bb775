"""The API server builds the Task Execution API's versioned routers when it starts, so the first task does not wait
for them (they took 19.6 s of the first job's validate_spec, with the whole API server standing still): the app that
uvicorn serves (airflow.api_fastapi.main:app) is looked up, its /execution mount prepared once, nothing else."""

import asyncio
import sys
from types import ModuleType, SimpleNamespace

from training_console.app import app as console_app
from training_console.warmup import build_execution_api_routers


class LazyRouters:
    """What matters of a Cadwyn app: routers built by _cadwyn_initialize, else on the first request."""

    def __init__(self):
        self._cadwyn_initialized = False
        self.builds = 0

    def _cadwyn_initialize(self):
        self.builds += 1
        self._cadwyn_initialized = True


def serve(monkeypatch, routes):
    main = ModuleType("airflow.api_fastapi.main")
    main.app = SimpleNamespace(routes=routes)
    monkeypatch.setitem(sys.modules, "airflow.api_fastapi.main", main)


def test_the_plugin_apps_startup_builds_the_execution_api_routers_once(monkeypatch):
    execution, other = LazyRouters(), LazyRouters()
    serve(monkeypatch, [SimpleNamespace(path="/execution", app=execution), SimpleNamespace(path="/other", app=other)])

    async def start_and_stop():
        async with console_app.router.lifespan_context(console_app):  # what the API server's lifespan enters
            pass

    asyncio.run(start_and_stop())
    build_execution_api_routers()  # a second worker's start, or a second call: nothing to build
    assert (execution.builds, other.builds) == (1, 0)


def test_a_failing_build_leaves_it_to_the_first_request(monkeypatch, caplog):
    class Broken(LazyRouters):
        def _cadwyn_initialize(self):
            raise RuntimeError("cadwyn changed")

    serve(monkeypatch, [SimpleNamespace(path="/execution", app=Broken())])
    build_execution_api_routers()
    assert "the first task will" in caplog.text

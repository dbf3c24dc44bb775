"""The first task after the API server starts waited 20 s (30 s at load 8) for its first call to the Task Execution
API: that API is a Cadwyn app, which builds the routers of every API version on its first request, inside the event
loop, so the whole API server (UI, REST, every task) stood still meanwhile. Measured: validate_spec of the first job
19.6 s, of later ones under 1 s; the API server's log showed `PATCH /execution/task-instances/<id>/run` taking
19 050 ms and no other request served in between.

This plugin app's lifespan runs when the API server starts (Airflow enters the lifespan of every mounted app), before
it serves anything: the routers are built there, so starting takes those seconds once and the first job does not.
Cadwyn's lazy build is private API: anything unexpected is logged and left to happen on the first request, as before.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import asynccontextmanager

log = logging.getLogger(__name__)


def execution_api_apps() -> list:
    """The API server's mounted Task Execution API app(s) whose versioned routers are not built yet."""
    main = sys.modules.get("airflow.api_fastapi.main")
    root = getattr(main, "app", None)
    found = []
    for route in getattr(root, "routes", ()):
        sub = getattr(route, "app", None)
        if getattr(route, "path", None) == "/execution" and hasattr(sub, "_cadwyn_initialize") \
                and not getattr(sub, "_cadwyn_initialized", True):
            found.append(sub)
    return found


def build_execution_api_routers() -> None:
    for app in execution_api_apps():
        started = time.monotonic()
        try:
            app._cadwyn_initialize()
        except Exception as err:  # noqa: BLE001 - never stop the API server for a warm-up
            log.warning("Could not prepare the Task Execution API at start (the first task will): %s", err)
            return
        log.info("Task Execution API routers built at start in %.1f s (else the first task would wait for them)",
                 time.monotonic() - started)


@asynccontextmanager
async def warm_up(app):
    build_execution_api_routers()
    yield

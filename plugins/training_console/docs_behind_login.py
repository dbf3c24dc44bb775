"""A plugin app's /openapi.json and /docs for logged-in Airflow users only (FastAPI serves them to anyone by
default): build the app with openapi_url=None, docs_url=None, redoc_url=None, then call add_docs_behind_login(app).
The Swagger page's browser request for the schema carries the UI's `_token` cookie, so the page keeps working."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations (Request) at runtime.

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from airflow.api_fastapi.core_api.security import get_user


def add_docs_behind_login(app: FastAPI) -> None:
    logged_in = [Depends(get_user)]

    @app.get("/openapi.json", include_in_schema=False, dependencies=logged_in)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=logged_in)
    def docs(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=request.scope.get("root_path", "") + "/openapi.json",
                                   title=f"{app.title} - API")

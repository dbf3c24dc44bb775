"""The plugins' web boundary: which browser requests may change anything, and the headers every page carries.

Airflow's UI logs a browser in with its `_token` cookie, and a browser attaches that cookie to requests that pages of
other origins make too (an auto-submitted form, a `fetch` with credentials). A route that changes state on the cookie
alone can be forged from any page the user visits. So `refuse_cross_site`, one dependency of each plugin app (every
route has it: a new route cannot forget it), refuses a state-changing request unless it comes from this origin:

- `Sec-Fetch-Site`, which browsers set and pages cannot, must be `same-origin` (or `none`: typed by the user);
- `Origin`, when sent, must be the API server's own (the request's Host, or [api] base_url behind a proxy);
- and the request must carry what a form cannot send and a cross-origin page cannot send without a CORS preflight,
  which Airflow's API server refuses to other origins: a JSON body (`Content-Type: application/json`) or an
  `Authorization` header (the REST API's and the SDK's bearer token, which no browser attaches on its own).

`security_headers` (the console's middleware) gives every response a Content-Security-Policy that lets a page run only
its own scripts and styles (plotly is served from here, and the two style elements it inserts are allowed by their
hashes: training_console/vendor.py), be framed only by Airflow's own
pages (`frame-ancestors 'self'`: the nav entry's iframe), and `nosniff`, so a job's file is never run as a script.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from airflow.configuration import conf
from fastapi import HTTPException, Request

from training_console.vendor import plotly_inline_style_hashes

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAME_ORIGIN_SITES = frozenset({"same-origin", "none"})
OTHER_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


@functools.cache
def content_security_policy() -> str:
    """Only this origin's scripts and styles, plus the style elements plotly.js inserts, by their hashes (vendor.py)."""
    return "; ".join((
        "default-src 'self'", "script-src 'self'", " ".join(("style-src 'self'", *plotly_inline_style_hashes())),
        "img-src 'self' data: blob:", "font-src 'self' data:", "connect-src 'self'", "object-src 'none'",
        "base-uri 'none'", "form-action 'self'", "frame-ancestors 'self'"))


def _forged(why: str) -> HTTPException:
    return HTTPException(403, f"refused: {why}; a request that changes a job must come from the training-jobs view "
                              "itself or carry an API token (Authorization: Bearer ...), never from another site's page")


def _own_hosts(request: Request) -> set[str]:
    """host[:port] this API server answers as: the request's Host, and [api] base_url's (behind a proxy)."""
    hosts = {request.headers.get("host", "")}
    base_url = conf.get("api", "base_url", fallback="") or ""
    if base_url:
        hosts.add(urlsplit(base_url).netloc)
    return {h.lower() for h in hosts if h}


def refuse_cross_site(request: Request) -> None:
    """The one cross-site request forgery guard of the plugins' routes (see the module's docstring)."""
    if request.method in SAFE_METHODS:
        return
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in SAME_ORIGIN_SITES:
        raise _forged(f"the browser says this {request.method} came from a {site} page")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() not in _own_hosts(request):
        raise _forged(f"a {request.method} from the page of {origin}")
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json" and not request.headers.get("authorization"):
        raise _forged(f"a {request.method} with neither a JSON body (Content-Type: application/json) nor an "
                      "Authorization header, as a form sends")


async def security_headers(request: Request, call_next):
    """Middleware: the Content-Security-Policy and the other headers of every response (see the module's docstring)."""
    response = await call_next(request)
    for name, value in {"Content-Security-Policy": content_security_policy(), **OTHER_HEADERS}.items():
        response.headers.setdefault(name, value)
    return response

"""The plugins' web boundary: which browser requests may change anything, and the headers every page carries.

Airflow's UI logs a browser in with its `_token` cookie, and a browser attaches that cookie to requests that pages of
other origins make too (an auto-submitted form, a `fetch` with credentials). A route that changes state on the cookie
alone can be forged from any page the user visits. So `refuse_cross_site`, one dependency of each plugin app (every
route has it: a new route cannot forget it), refuses a state-changing request unless it comes from this origin:

- `Sec-Fetch-Site`, which browsers set and pages cannot, must be `same-origin` (or `none`: typed by the user);
- `Origin`, when sent, must be the API server's own, as its configuration says: [api] base_url (what browsers reach,
  behind a proxy too), else the listener's address ([api] host and port; a loopback listener is also reached as
  localhost and [::1]). Never the request's `Host`: a page of another site that a DNS name of its own points at this
  server (DNS rebinding) sends its own name as both Host and Origin;
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

from fastapi import HTTPException, Request

from operators.console_urls import base_url
from training_console.vendor import plotly_inline_style_hashes

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAME_ORIGIN_SITES = frozenset({"same-origin", "none"})
DEFAULT_PORTS = {"http": 80, "https": 443}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
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


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL or an Origin header, the port written out (http://a and http://a:80 are one)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port that is no number: matches nothing
        port = -1
    return scheme, (parts.hostname or "").lower(), port


def own_origins() -> set[tuple[str, str, int | None]]:
    """The origins this API server is reached at, from its configuration (see the module's docstring)."""
    scheme, host, port = _origin(base_url())  # [api] base_url, else http://<[api] host>:<[api] port>
    hosts = LOOPBACK_NAMES if host in LOOPBACK_NAMES else (host,)  # no other site can serve a loopback name
    return {(scheme, h, port) for h in hosts}


def refuse_cross_site(request: Request) -> None:
    """The one cross-site request forgery guard of the plugins' routes (see the module's docstring)."""
    if request.method in SAFE_METHODS:
        return
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in SAME_ORIGIN_SITES:
        raise _forged(f"the browser says this {request.method} came from a {site} page")
    origin = request.headers.get("origin")
    if origin is not None and _origin(origin) not in own_origins():
        raise _forged(f"a {request.method} from the page of {origin}, not this server's own {base_url()} "
                      "(behind a proxy or another address, an admin sets [api] base_url to the one browsers use)")
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

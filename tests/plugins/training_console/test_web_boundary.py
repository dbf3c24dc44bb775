"""The plugins' cross-site request forgery guard and page headers (training_console/web_boundary.py), on a small app
with the same dependency and middleware; the served Airflow in a real browser: tests/integration/test_web_boundary.py."""

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from training_console.web_boundary import content_security_policy, refuse_cross_site, security_headers

app = FastAPI(dependencies=[Depends(refuse_cross_site)])
app.middleware("http")(security_headers)
changed: list[str] = []


@app.post("/stop")
def stop() -> dict:
    changed.append("stopped")
    return {"stopped": True}


@app.get("/jobs")
def jobs() -> dict:
    return {"jobs": []}


client = TestClient(app, base_url="http://airflow.example:8080")
JSON = {"Content-Type": "application/json"}


@pytest.fixture(autouse=True)
def served_at_airflow_example(monkeypatch):
    """The server's own origin is its configuration's: here [api] base_url, where the test client sends to."""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080")


def _refused(response, why: str) -> None:
    assert response.status_code == 403, response.text
    detail = response.json()["detail"]
    assert detail.startswith("refused: ") and why in detail and "never from another site's page" in detail


def test_what_another_sites_page_can_send_changes_nothing():
    changed.clear()
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    _refused(client.post("/stop", content="a=1", headers={**form, "Sec-Fetch-Site": "cross-site",
                                                          "Origin": "http://evil.example"}), "cross-site page")
    _refused(client.post("/stop", headers={**JSON, "Sec-Fetch-Site": "same-site",
                                           "Origin": "http://airflow.example:9999"}), "same-site page")
    # an older browser without Fetch metadata still sends Origin on a POST
    _refused(client.post("/stop", headers={**JSON, "Origin": "http://airflow.example:9999"}),
             "from the page of http://airflow.example:9999")
    # a text/plain form (no preflight), even with neither header
    _refused(client.post("/stop", content="{}", headers={"Content-Type": "text/plain"}), "as a form sends")
    _refused(client.post("/stop"), "neither a JSON body")
    assert changed == []


def test_the_views_own_json_request_and_a_token_client_pass():
    changed.clear()
    own = {**JSON, "Sec-Fetch-Site": "same-origin", "Origin": "http://airflow.example:8080"}
    assert client.post("/stop", content="{}", headers=own).json() == {"stopped": True}
    assert client.post("/stop", content=b"\x1f\x8b", headers={"Authorization": "Bearer t",
                                                              "Content-Type": "application/gzip"}).status_code == 200
    assert client.post("/stop", headers={**JSON, "Sec-Fetch-Site": "none"}).status_code == 200  # typed by the user
    assert changed == ["stopped"] * 3
    # reads are never refused: a link from another site still opens the view
    assert client.get("/jobs", headers={"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}).status_code \
        == 200


def test_the_api_servers_base_url_is_its_origin_behind_a_proxy(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.corp.example/")
    proxied = {**JSON, "Sec-Fetch-Site": "same-origin", "Origin": "https://airflow.corp.example"}
    assert client.post("/stop", headers=proxied).status_code == 200


def test_a_forged_host_is_not_the_servers_origin():
    """A page of evil.example that its DNS points at this server (DNS rebinding) sends its own name as Host and Origin,
    and the browser calls that same-origin: the server's origin is its configuration's, never the request's Host."""
    changed.clear()
    forged = {**JSON, "Host": "evil.example", "Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}
    _refused(client.post("/stop", headers=forged), "from the page of http://evil.example, not this server's own "
                                                   "http://airflow.example:8080")
    _refused(client.post("/stop", headers={**forged, "Authorization": "Bearer t"}), "http://evil.example")
    # the configured origin passes whatever the Host says (a proxy may rewrite it)
    assert client.post("/stop", headers={**JSON, "Host": "backend:8080", "Origin": "http://airflow.example:8080"}
                       ).status_code == 200
    assert changed == ["stopped"]


def test_the_origin_is_scheme_host_and_port_of_the_base_url(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.corp.example/airflow/")
    for origin in ("https://airflow.corp.example", "https://AIRFLOW.corp.example:443"):
        assert client.post("/stop", headers={**JSON, "Origin": origin}).status_code == 200, origin
    for origin in ("http://airflow.corp.example", "https://airflow.corp.example:8443", "https://corp.example",
                   "null", "https://airflow.corp.example:x"):
        _refused(client.post("/stop", headers={**JSON, "Origin": origin}), f"from the page of {origin}")


def test_without_a_base_url_the_listeners_address_is_the_origin(monkeypatch):
    """[api] host and port; a loopback listener is reached as 127.0.0.1, localhost or [::1], which no other site's
    page can be served from."""
    monkeypatch.delenv("AIRFLOW__API__BASE_URL")
    monkeypatch.setenv("AIRFLOW__API__HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__API__PORT", "8793")
    for origin in ("http://127.0.0.1:8793", "http://localhost:8793", "http://[::1]:8793"):
        assert client.post("/stop", headers={**JSON, "Origin": origin}).status_code == 200, origin
    for origin in ("http://127.0.0.1:8794", "http://airflow.example:8080", "https://localhost:8793"):
        _refused(client.post("/stop", headers={**JSON, "Host": origin[origin.index("//") + 2:], "Origin": origin}),
                 f"from the page of {origin}")
    monkeypatch.setenv("AIRFLOW__API__HOST", "10.1.2.3")
    assert client.post("/stop", headers={**JSON, "Origin": "http://10.1.2.3:8793"}).status_code == 200
    _refused(client.post("/stop", headers={**JSON, "Origin": "http://localhost:8793"}), "http://localhost:8793")


def test_every_response_carries_the_policy_headers():
    policy = content_security_policy()
    for response in (client.get("/jobs"), client.post("/stop"), client.get("/no-such-route")):
        assert response.headers["Content-Security-Policy"] == policy
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'self'" in policy and "script-src 'self';" in policy and "unsafe" not in policy


def test_the_style_elements_plotly_inserts_are_allowed_by_their_hashes_and_nothing_else_inline():
    """plotly.js adds an empty <style> it fills through the CSSOM, and one with its map library's CSS; the browser test
    (tests/integration/test_web_boundary.py) sees no violation with exactly these."""
    import base64
    import hashlib

    from training_console.vendor import plotly_inline_style_hashes, plotly_js

    empty = "'sha256-" + base64.b64encode(hashlib.sha256(b"").digest()).decode() + "'"
    hashes = plotly_inline_style_hashes()
    assert hashes[0] == empty and len(hashes) == 2, hashes
    assert b".maplibregl-map{" in plotly_js().read_bytes()
    style = next(d for d in content_security_policy().split("; ") if d.startswith("style-src"))
    assert style == " ".join(("style-src 'self'", *hashes))

"""The plugins' cross-site request forgery guard and page headers (training_console/web_boundary.py), on a small app
with the same dependency and middleware; the served Airflow in a real browser: tests/integration/test_web_boundary.py."""

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

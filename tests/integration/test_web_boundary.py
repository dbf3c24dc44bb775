"""The web boundary of the training-jobs view (plugins/training_console/web_boundary.py, spec_access.py), in the
served Airflow with two users of the `User` role (tests/integration/airflow_server.py) and Debian's chromium.

Bob runs two jobs: one that fails with a text of his own after writing metrics, and one that trains until stopped.
Alice triggers a run naming bob's failed job: the lease refuses it at stage_code, and she marks her launch task failed.
Then, in the browser as alice (tests/integration/web_boundary_browser.js): a page on another origin of this host
auto-submits a form and sends `fetch`es at the stop route of bob's running job (her cookie goes with them: same site);
nothing stops. Her own job's page, reached through Airflow's nav entry, shows none of bob's metrics, files or failure
text, and says the job name belongs to another run. Bob then stops his job with the view's own Stop, inside Airflow's
frame. Every page walked (list, job pages, compare) draws with no Content-Security-Policy violation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from airflow_server import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SHOTS = REPO / "test-artifacts" / "web-boundary"
PLAYWRIGHT = Path(os.environ.get("PLAYWRIGHT_CORE_DIR",
                                  Path.home() / ".cache/training-jobs/playwright-core-1.65.1")) / "node_modules"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BOBS_FAILURE = "bob-private-failure-7f3e"
FAILING = f"""
import time
for step in range(3):
    print(f"loss={{0.9 / (step + 1):.3f}}", flush=True)
time.sleep(4)  # the launch stage writes metrics.json into the job root every few seconds
raise RuntimeError("{BOBS_FAILURE}")
"""
SLOW = """
import time
for epoch in range(600):
    print(f"epoch={epoch} loss={1.0 / (epoch + 1):.4f}", flush=True)
    time.sleep(1)
"""
# Another origin of this host (another port: the same site, so the browser sends Airflow's cookie with its requests).
EVIL_PAGE = """<!doctype html><html><body>
<iframe name="sink" title="sink"></iframe>
<form id="forged" method="POST" enctype="text/plain" target="sink" action="{stop}"><input name="{{}}" value=""></form>
<script>
const results = {{}};
async function attempt(name, options) {{
  try {{ const r = await fetch("{stop}", {{method: "POST", credentials: "include", ...options}}); results[name] = r.type + " " + r.status; }}
  catch (err) {{ results[name] = "refused by the browser: " + err.message; }}
}}
(async () => {{
  document.getElementById("forged").submit();
  await attempt("no-cors text/plain", {{mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}});
  await attempt("cors json", {{headers: {{"Content-Type": "application/json"}}, body: "{{}}"}});
  window.attackResults = results;
}})();
</script></body></html>"""


def _conf(tmp: Path, name: str, script: str) -> dict:
    code = tmp / name
    code.mkdir(parents=True)
    (code / "train.py").write_text(script)
    return {"job_name": name, "source_dir": str(code), "entry_point": "train.py", "output_path": str(tmp / "models"),
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}


def _trigger(api, conf: dict) -> str:
    status, run = api.call("POST", "/api/v2/dags/training_job/dagRuns", {"logical_date": None, "conf": conf})
    assert status == 200, run
    return run["dag_run_id"]


def _serve_evil_page(html: str) -> ThreadingHTTPServer:
    class Page(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _wait(what: str, check, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(1)
    return value


def test_another_site_stops_nothing_and_a_reused_job_name_shows_nothing_of_the_other_run(airflow_server, tmp_path):
    missing = [what for what, ok in (("chromium", Path(CHROMIUM).exists()), ("node", shutil.which("node")),
                                     ("playwright-core", (PLAYWRIGHT / "playwright-core").is_dir())) if not ok]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: run `make browser-deps` (make test does)")
    alice, bob = airflow_server.user_api("alice"), airflow_server.user_api("bob")
    suffix = os.urandom(3).hex()
    failed_name, slow_name = f"bob-failed-{suffix}", f"bob-slow-{suffix}"
    bob_failed = _trigger(bob, _conf(tmp_path, failed_name, FAILING))
    bob_slow = _trigger(bob, _conf(tmp_path, slow_name, SLOW))
    assert airflow_server.wait_for_run("training_job", bob_failed)["state"] == "failed"
    job = "/training-jobs/api/jobs/training_job/{run}/-1"
    _, bobs_files = bob.call("GET", job.format(run=bob_failed) + "/files")
    assert bobs_files["files"], bobs_files  # bob's output is there to be leaked
    assert bob.call("GET", job.format(run=bob_failed) + "/metrics")[1]["series"]["loss"]

    # alice names bob's job: refused by the lease, then she marks her launch task failed
    alices = _trigger(alice, _conf(tmp_path / "alice", failed_name, FAILING))
    assert airflow_server.wait_for_run("training_job", alices)["state"] == "failed"
    assert airflow_server.task_states("training_job", alices)[("stage_code", -1)] == "failed"
    status, body = alice.call("PATCH", f"/api/v2/dags/training_job/dagRuns/{alices}/taskInstances/launch_training",
                              {"new_state": "failed"})
    assert status == 200, body
    status, page = alice.call("GET", job.format(run=alices))
    assert status == 200 and page["files_note"].startswith("this job name belongs to another run"), page
    assert BOBS_FAILURE not in json.dumps(page)
    assert alice.call("GET", job.format(run=alices) + "/metrics")[1]["series"] == {}
    for route in ("/files", "/files/failure", "/artifacts/failure", "/artifacts/metrics.json"):
        status, body, _ = alice.raw("GET", job.format(run=alices) + route)
        assert status == 404 and b"belongs to another run" in body and BOBS_FAILURE.encode() not in body, route
    _, _, headers = alice.raw("GET", "/training-jobs/ui/")
    assert "frame-ancestors 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"

    _wait("bob's slow job running", lambda: airflow_server.task_states("training_job", bob_slow)
          .get(("launch_training", -1)) == "running")
    stop = f"{airflow_server.base_url}{job.format(run=bob_slow)}/stop"
    evil = _serve_evil_page(EVIL_PAGE.format(stop=stop))
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    env = {**os.environ, "NODE_PATH": str(PLAYWRIGHT), "CHROMIUM": CHROMIUM, "UI_BASE_URL": airflow_server.base_url,
           "EVIL_URL": f"http://127.0.0.1:{evil.server_address[1]}/", "UI_SHOTS": str(SHOTS),
           "UI_RESULT": str(SHOTS / "result.json"), "ALICE_PASSWORD": airflow_server.password_of("alice"),
           "BOB_PASSWORD": airflow_server.password_of("bob"), "ALICE_RUN": alices, "BOB_SLOW_RUN": bob_slow,
           "BOB_FAILED_RUN": bob_failed, "BOBS_FAILURE": BOBS_FAILURE}
    try:
        proc = subprocess.run(["node", str(REPO / "tests/integration/web_boundary_browser.js")], env=env,
                              capture_output=True, text=True, timeout=800)
    finally:
        evil.shutdown()
    result = json.loads((SHOTS / "result.json").read_text()) if (SHOTS / "result.json").is_file() else {}
    assert proc.returncode == 0, (f"browser walk-through failed after steps {result.get('steps')} "
                                  f"(screenshot {SHOTS / 'failure.png'}):\n{result.get('error') or proc.stderr[-3000:]}")
    assert result["csp_violations"] == []
    stopped = airflow_server.wait_for_run("training_job", bob_slow, timeout=240)
    assert stopped["state"] == "failed"
    _, page = bob.call("GET", job.format(run=bob_slow))
    assert page["status"] == "stopped" and page["failure"].startswith("Stopped by bob at "), page["failure"]


def test_a_forged_host_with_its_own_origin_changes_nothing(airflow_server):
    """A page of evil.example whose DNS name points at the server (DNS rebinding) sends its own name as both Host and
    Origin; the server's origin is its configured one ([api] base_url: tests/integration/airflow_server.py sets it to
    the free port it picked), so the guard refuses it before the route runs. No browser needed: the headers are what
    one would send."""
    import urllib.error
    import urllib.request

    alice = airflow_server.user_api("alice")
    stop = "/training-jobs/api/jobs/training_job/no-such-run/-1/stop"

    def post(host: str | None, origin: str) -> tuple[int, str]:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {alice.token}", "Origin": origin,
                   "Sec-Fetch-Site": "same-origin", **({"Host": host} if host else {})}
        request = urllib.request.Request(airflow_server.base_url + stop, data=b"{}", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    status, body = post("evil.example", "http://evil.example")
    assert status == 403 and "refused: a POST from the page of http://evil.example, not this server's own " \
                             f"{airflow_server.base_url}" in json.loads(body)["detail"], body
    status, body = post(f"evil.example:{airflow_server.port}", f"http://evil.example:{airflow_server.port}")
    assert status == 403 and "refused: a POST from the page of http://evil.example" in body, body
    # the same request from the server's own origin passes the guard and reaches the route (no such run: 404)
    status, body = post(None, airflow_server.base_url)
    assert status == 404 and "refused" not in body, body

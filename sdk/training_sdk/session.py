"""Where the Airflow API is and how to log in: environment variables, a config file, or the local install.

Resolution order (first that gives a value wins):
  1. arguments of Session(api_url=..., token=..., username=..., password=...)
  2. environment: TRAINING_API_URL, TRAINING_API_TOKEN, TRAINING_API_USERNAME, TRAINING_API_PASSWORD
  3. config file: $TRAINING_SDK_CONFIG, else ~/.config/training-sdk/config.json
     {"api_url": "...", "username": "...", "password": "..."} (or "token")
  4. the local `make airflow`: http://127.0.0.1:8080, user admin, the password the simple auth manager generated
     (simple_auth_manager_passwords.json.generated, or the file AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE names)
     in $AIRFLOW_HOME or the current directory or one of its parents (the repository root).

A token comes from the simple auth manager's POST /auth/token; when it expires (401) the session logs in again.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping

from training_sdk.errors import TrainingSdkError

DEFAULT_API_URL = "http://127.0.0.1:8080"
PASSWORD_FILES = ("simple_auth_manager_passwords.json.generated", "simple_auth_manager_passwords.json")
UPLOAD_PREFIX = "/training-sdk"  # plugins/training_sdk_api.py
CONSOLE_PREFIX = "/training-jobs"  # plugins/training_jobs_plugin.py (the training-jobs view)


class ApiError(TrainingSdkError):
    def __init__(self, method: str, path: str, status: int, detail: Any):
        self.status = status
        self.detail = detail
        super().__init__(f"Airflow API {method} {path} answered {status}: {_detail_text(detail)}")


def _detail_text(detail: Any) -> str:
    if isinstance(detail, Mapping) and "detail" in detail:
        detail = detail["detail"]
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(str(d.get("msg", d)) if isinstance(d, Mapping) else str(d) for d in detail)
    return str(detail)[:2000]


def _config_file() -> dict[str, Any]:
    path = Path(os.environ.get("TRAINING_SDK_CONFIG") or Path.home() / ".config" / "training-sdk" / "config.json")
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise TrainingSdkError(f"{path} is not valid JSON ({err}); fix or remove it") from None
    if not isinstance(data, dict):
        raise TrainingSdkError(f"{path} must hold a JSON object like {{\"api_url\": ..., \"username\": ...}}")
    return data


def _search_dirs() -> Iterable[Path]:
    if os.environ.get("AIRFLOW_HOME"):
        yield Path(os.environ["AIRFLOW_HOME"])
    cwd = Path.cwd()
    yield cwd
    yield from cwd.parents


def local_admin_password(username: str = "admin") -> str | None:
    """The password `make airflow` (the simple auth manager) generated for `username`, if this machine has one."""
    candidates = []
    if os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"):
        candidates.append(Path(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]))
    candidates += [d / name for d in _search_dirs() for name in PASSWORD_FILES]
    for path in candidates:
        try:
            passwords = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(passwords, dict) and passwords.get(username):
            return str(passwords[username])
    return None


class Session:
    """A logged-in client of one Airflow's REST API (JSON in, JSON out) and of the SDK's upload plugin."""

    def __init__(self, api_url: str | None = None, *, token: str | None = None, username: str | None = None,
                 password: str | None = None, timeout: float = 60.0):
        cfg = _config_file()
        env = os.environ
        self.api_url = (api_url or env.get("TRAINING_API_URL") or cfg.get("api_url") or DEFAULT_API_URL).rstrip("/")
        self.username = username or env.get("TRAINING_API_USERNAME") or cfg.get("username") or "admin"
        self._password = password or env.get("TRAINING_API_PASSWORD") or cfg.get("password")
        self._token = token or env.get("TRAINING_API_TOKEN") or cfg.get("token")
        self._fixed_token = bool(self._token)
        self.timeout = timeout

    # -- authentication ---------------------------------------------------------------------------------------
    def _login(self) -> str:
        password = self._password or local_admin_password(self.username)
        if not password:
            raise TrainingSdkError(
                f"no credentials for {self.api_url}: set TRAINING_API_PASSWORD (or TRAINING_API_TOKEN), or run from "
                f"the directory of a `make airflow` install (its simple_auth_manager_passwords.json.generated)")
        status, body, _ = self._send("POST", "/auth/token", json.dumps(
            {"username": self.username, "password": password}).encode(), {"Content-Type": "application/json"})
        if status not in (200, 201):
            raise TrainingSdkError(f"login to {self.api_url} as {self.username!r} refused ({status}): "
                                   f"{_detail_text(_json_or_text(body))}; check the password")
        return json.loads(body)["access_token"]

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        if not self._token:
            self._token = self._login()
        return {"Authorization": f"Bearer {self._token}", **dict(extra or {})}

    # -- transport --------------------------------------------------------------------------------------------
    def _send(self, method: str, path: str, data: bytes | None, headers: Mapping[str, str],
              timeout: float | None = None) -> tuple[int, bytes, Mapping[str, str]]:
        request = urllib.request.Request(self.api_url + path, data=data, method=method, headers=dict(headers))
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                return response.status, response.read(), response.headers
        except urllib.error.HTTPError as err:
            return err.code, err.read(), err.headers
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise TrainingSdkError(f"cannot reach the Airflow API at {self.api_url} ({reason}); is it running "
                                   f"(`make airflow`)? Set TRAINING_API_URL to use another one") from None

    def request(self, method: str, path: str, body: Any = None, *, params: Mapping[str, Any] | None = None,
                data: bytes | None = None, content_type: str = "application/json", ok: Iterable[int] = (200, 201),
                timeout: float | None = None) -> Any:
        """Call the API; returns the decoded JSON. Raises ApiError for any status not in `ok`."""
        if params:
            path += "?" + urllib.parse.urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        payload = data if data is not None else (None if body is None else json.dumps(body).encode())
        extra = {"Content-Type": content_type, "Accept": "application/json"} if payload is not None else {
            "Accept": "application/json"}
        status, raw, _ = self._send(method, path, payload, self._headers(extra), timeout)
        if status == 401 and not self._fixed_token:  # the token expired: log in again once
            self._token = None
            status, raw, _ = self._send(method, path, payload, self._headers(extra), timeout)
        if status not in tuple(ok):
            raise ApiError(method, path.split("?")[0], status, _json_or_text(raw))
        return _json_or_text(raw)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    # -- the calls the SDK makes -----------------------------------------------------------------------------
    def dag_params(self, dag_id: str) -> dict[str, dict[str, Any]]:
        """The DAG's Params as the API serves them: name -> {"value": default, "schema": {...}, ...}."""
        try:
            details = self.get(f"/api/v2/dags/{_q(dag_id)}/details")
        except ApiError as err:
            if err.status == 404:
                raise TrainingSdkError(f"DAG {dag_id!r} is not known to {self.api_url}; check dag_id (and that the "
                                       f"dag-processor parsed it)") from None
            raise
        return dict(details.get("params") or {})

    def trigger(self, dag_id: str, run_id: str, conf: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", f"/api/v2/dags/{_q(dag_id)}/dagRuns",
                            {"dag_run_id": run_id, "logical_date": None, "conf": dict(conf)})

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}")

    def dag_runs(self, dag_id: str, limit: int = 20) -> list[dict[str, Any]]:
        body = self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns", limit=limit, order_by="-run_after")
        return list(body.get("dag_runs") or [])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        body = self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances", limit=1000)
        return list(body.get("task_instances") or [])

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        try:
            body = self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}/"
                            f"xcomEntries/{_q(key)}", map_index=map_index, deserialize="true")
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        value = body.get("value")
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, token: str | None = None,
                 map_index: int = -1) -> tuple[list[Any], str | None]:
        """One chunk of a task try's log and the continuation token to read on from (None: the try's log ended)."""
        body = self.get(f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}/logs/"
                        f"{try_number}", token=token, map_index=map_index, full_content="false")
        return list(body.get("content") or []), body.get("continuation_token")

    def set_run_note(self, dag_id: str, run_id: str, note: str) -> None:
        self.request("PATCH", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}", {"note": note[:1000]},
                     params={"update_mask": "note"})

    def set_task_state(self, dag_id: str, run_id: str, task_id: str, state: str, map_index: int = -1) -> None:
        mapped = f"/{int(map_index)}" if map_index >= 0 else ""
        self.request("PATCH", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}{mapped}",
                     {"new_state": state})

    def upload_code(self, dag_id: str, archive: bytes, sha256: str) -> dict[str, Any]:
        """Upload a packed source_dir into the caller's part of the workspace's staging area (plugins/
        training_sdk_api.py); the answer's source_dir is where it landed."""
        try:
            return self.request("PUT", f"{UPLOAD_PREFIX}/code/{sha256}.tar.gz", data=archive,
                                content_type="application/gzip", params={"dag_id": dag_id}, timeout=600)
        except ApiError as err:
            if err.status == 404 and "does not exist" in _detail_text(err.detail):  # the endpoint's own answer
                raise TrainingSdkError(_detail_text(err.detail)) from None
            if err.status == 404:
                raise TrainingSdkError(f"{self.api_url} has no code upload endpoint ({UPLOAD_PREFIX}): is the "
                                       f"training_sdk_api plugin in its plugins folder? Or give code_location=") \
                    from None
            raise

    def staged_code(self) -> dict[str, Any]:
        """The caller's staged code archives (plugins/training_sdk_api.py): {"archives": [{"name", "sha256", "bytes",
        "uploaded_at", "expires_at", "source_dir"}, ...], "used_bytes", "quota_bytes", "expiry_days"}; the latest
        upload first. Listing removes the caller's expired archives ([training] sdk_code_expiry_days)."""
        try:
            return self.get(f"{UPLOAD_PREFIX}/code")
        except ApiError as err:
            if err.status in (404, 405):
                raise TrainingSdkError(f"{self.api_url} cannot list staged code ({UPLOAD_PREFIX}/code): is its "
                                       "training_sdk_api plugin in the plugins folder, and up to date?") from None
            raise

    def delete_code(self, sha256: str) -> dict[str, Any]:
        """Delete one of the caller's own staged archives, by its sha256 (or its name, <sha256>.tar.gz): a job
        triggered with it and not yet staged fails to find its source_dir."""
        name = sha256 if sha256.endswith(".tar.gz") else f"{sha256}.tar.gz"
        try:
            return self.request("DELETE", f"{UPLOAD_PREFIX}/code/{_q(name)}")
        except ApiError as err:
            if err.status == 400 or (err.status == 404 and "no staged code" in _detail_text(err.detail)):
                raise TrainingSdkError(_detail_text(err.detail)) from None  # the endpoint's own answer
            if err.status in (404, 405):
                raise TrainingSdkError(f"{self.api_url} cannot delete staged code ({UPLOAD_PREFIX}/code/<name>): "
                                       "is its training_sdk_api plugin in the plugins folder, and up to date?") \
                    from None
            raise

    def jobs(self, **params: Any) -> dict[str, Any]:
        """The training-jobs view's list (plugins/training_console): every DAG's jobs the caller may read, searches
        as one item with their trials; params: q, status, dag_id, sort, order, offset, limit."""
        return self.get(f"{CONSOLE_PREFIX}/api/jobs", **params)

    def find_job(self, job_name: str, dag_id: str | None = None) -> dict[str, Any] | None:
        """The job the view shows under this name (a job from the form, --conf, REST, a schedule, or a search's
        trial): its list row with dag_id, run_id, map_index and task_prefix; None if there is none."""
        try:
            listed = self.jobs(q=job_name, dag_id=dag_id, limit=500)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        for item in listed.get("items") or []:
            for row in [item, *(item.get("trials") or [])]:
                if row.get("job_name") == job_name and "map_index" in row:
                    return row
        return None

    def stop_job(self, dag_id: str, run_id: str, map_index: int = -1) -> None:
        """Stop through the view's endpoint: the server records "Stopped by <you> at <time>" and marks the stages
        under way failed. A job that already ended is left as it is."""
        self.request("POST", f"{CONSOLE_PREFIX}/api/jobs/{_q(dag_id)}/{_q(run_id)}/{int(map_index)}/stop", {},
                     ok=(200, 409))

    def reproduction(self, dag_id: str, run_id: str, map_index: int = -1) -> dict[str, Any]:
        """{"dag_id", "conf"}: what reproduces a job, from its lineage record (the view's Reproduce route, plugins/
        training_console/reproduce.py); TrainingSdkError with the view's one line when it cannot be reproduced."""
        try:
            return self.get(f"{CONSOLE_PREFIX}/api/jobs/{_q(dag_id)}/{_q(run_id)}/{int(map_index)}/reproduction")
        except ApiError as err:
            if err.status in (404, 409):
                raise TrainingSdkError(f"cannot reproduce run {run_id} of {dag_id}: {_detail_text(err.detail)}") \
                    from None
            raise

    def job_metrics(self, dag_id: str, run_id: str, map_index: int = -1) -> dict[str, Any] | None:
        """{"final", "series"} of a job (live while it trains), from the training-jobs view's API (plugins/
        training_console); a search trial is its run's map index."""
        try:
            return self.get(f"{CONSOLE_PREFIX}/api/jobs/{_q(dag_id)}/{_q(run_id)}/{int(map_index)}/metrics")
        except ApiError as err:
            if err.status == 404:
                return None
            raise


def _q(part: str) -> str:
    return urllib.parse.quote(str(part), safe="")


def _json_or_text(raw: bytes) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")

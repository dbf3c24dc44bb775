"""A small fake Kubernetes API server on loopback, for driving the Kubernetes launcher with the real clients.

It serves the REST paths the launcher uses (the real ones, so the `kubernetes` and `kubernetes_asyncio`
clients talk to it unchanged):

  POST/GET/DELETE /apis/batch/v1/namespaces/{ns}/jobs[/{name}[/status]]   (PATCH: annotations, owners)
  POST/GET/DELETE /api/v1/namespaces/{ns}/services[/{name}]
  GET/DELETE      /api/v1/namespaces/{ns}/pods?labelSelector=...     (list, delete collection)
  GET/DELETE      /api/v1/namespaces/{ns}/pods/{name}
  GET             /api/v1/namespaces/{ns}/pods/{name}/log?follow&timestamps&sinceSeconds&container
  GET             /api/v1/namespaces/{ns}/events                    (always empty)

and plays a minimal Job controller: creating an Indexed Job creates one Pending pod per index (named
`<job>-<index>-<suffix>`, with the completion-index annotation/label and the Job as owner); a failed pod
is judged by the Job's podFailurePolicy (FailJob / Ignore / Count against backoffLimit, with a
replacement pod for the index); all indexes succeeded -> Complete. Deleting a Job deletes its pods and
the objects it owns (garbage collection) unless propagationPolicy is Orphan.

Tests drive the pods through methods: set_running, log, terminate (exit code, OOMKilled, final log lines
that a follow stream misses), set_waiting (ImagePullBackOff / ErrImagePull / InvalidImageName with a
message), evict (DisruptionTarget), set_unschedulable, expire_deadline. Every request is recorded in
`requests` as (method, path).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

CONTAINER = "train"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def rfc3339(ts_ns: int | None = None) -> str:
    ts_ns = time.time_ns() if ts_ns is None else ts_ns
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts_ns // 1_000_000_000))


def rfc3339nano(ts_ns: int) -> str:
    """Like Go's time.RFC3339Nano, which the kubelet uses: trailing zeros of the fraction are dropped."""
    seconds, nanos = divmod(ts_ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"


@dataclass
class LogLine:
    ts_ns: int
    text: str
    follow_visible: bool = True  # False: written in the last moment; a follow stream closes before it


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def _go_bool(value: str | None) -> bool:
    """Query booleans as the API server parses them (Go's strconv.ParseBool)."""
    return value in ("1", "t", "T", "TRUE", "true", "True")


def _selector_matches(selector: str, labels: dict) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        key, _, value = term.replace("==", "=").partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKubeApi:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jobs: dict[tuple[str, str], dict] = {}
        self.services: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.logs: dict[tuple[str, str], list[LogLine]] = {}
        self.requests: list[tuple[str, str]] = []
        self.deletions: list[tuple[str, str, str | None]] = []  # (kind, name, propagationPolicy)
        self.stopping = False
        self._last_ts = 0
        self._rv = 0
        self._suffix = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube-api", daemon=True
        )

    # ---- lifecycle ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, namespace: str = "default") -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }

    # ---- helpers --------------------------------------------------------------------------------------
    def _now_ns(self) -> int:
        self._last_ts = max(self._last_ts + 1, time.time_ns())
        return self._last_ts

    def _meta(self, obj: dict, namespace: str) -> None:
        self._rv += 1
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        meta["uid"] = str(uuid.uuid4())
        meta["resourceVersion"] = str(self._rv)
        meta["creationTimestamp"] = rfc3339()

    def _find_pod(self, name: str) -> dict:
        for (_, pod_name), pod in self.pods.items():
            if pod_name == name:
                return pod
        raise KeyError(f"no pod {name}")

    def _find_job(self, name: str) -> dict:
        for (_, job_name), job in self.jobs.items():
            if job_name == name:
                return job
        raise KeyError(f"no job {name}")

    def _job_of(self, pod: dict) -> dict | None:
        for ref in pod["metadata"].get("ownerReferences", []):
            for job in self.jobs.values():
                if job["metadata"]["uid"] == ref["uid"]:
                    return job
        return None

    def _create_pod(self, job: dict, index: int) -> dict:
        self._suffix += 1
        meta = job["metadata"]
        name = f"{meta['name']}-{index}-{self._suffix:05d}"
        template = json.loads(json.dumps(job["spec"]["template"]))
        labels = dict(template.get("metadata", {}).get("labels") or {})
        labels.update(
            {
                "batch.kubernetes.io/job-name": meta["name"],
                "job-name": meta["name"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
                INDEX_KEY: str(index),
            }
        )
        annotations = dict(template.get("metadata", {}).get("annotations") or {})
        annotations[INDEX_KEY] = str(index)
        spec = template["spec"]
        spec["hostname"] = f"{meta['name']}-{index}"
        image = spec["containers"][0]["image"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": spec["containers"][0]["name"],  # "train", a step's "step", ...
                        "image": image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                ],
            },
        }
        self._meta(pod, meta["namespace"])
        key = (meta["namespace"], name)
        self.pods[key] = pod
        self.logs[key] = []
        return pod

    def _container(self, pod: dict) -> dict:
        return pod["status"]["containerStatuses"][0]

    @staticmethod
    def _is_active(pod: dict) -> bool:
        return pod["status"]["phase"] in ("Pending", "Running")

    def _policy_action(self, job: dict, pod: dict) -> str:
        policy = job["spec"].get("podFailurePolicy") or {}
        terminated = self._container(pod)["state"].get("terminated") or {}
        conditions = {c["type"]: c.get("status") for c in pod["status"].get("conditions", [])}
        for rule in policy.get("rules", []):
            on_codes = rule.get("onExitCodes")
            if on_codes and terminated:
                if on_codes.get("containerName") not in (None, CONTAINER):
                    continue
                code = terminated.get("exitCode")
                inside = code in on_codes["values"]
                if code != 0 and (inside if on_codes["operator"] == "In" else not inside):
                    return rule["action"]
            for pattern in rule.get("onPodConditions") or []:
                if conditions.get(pattern["type"]) == pattern.get("status", "True"):
                    return rule["action"]
        return "Count"

    def _finish_job(self, job: dict, kind: str, reason: str, message: str) -> None:
        now = rfc3339()
        status = job["status"]
        conditions = status.setdefault("conditions", [])
        first = "SuccessCriteriaMet" if kind == "Complete" else "FailureTarget"
        for ctype in (first, kind):
            conditions.append(
                {
                    "type": ctype,
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                }
            )
        if kind == "Complete":
            status["completionTime"] = now
        for pod in self._pods_of_job(job):
            if self._is_active(pod):
                # The Job controller terminates the pods still running (SIGTERM -> 143).
                self._terminate(pod, 143, "Error", None)
                pod["_counted"] = True
        status["active"] = 0

    def _pods_of_job(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]
        return [
            p for p in self.pods.values() if any(r["uid"] == uid for r in p["metadata"].get("ownerReferences", []))
        ]

    def _finished(self, job: dict) -> bool:
        return any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True"
            for c in job["status"].get("conditions", [])
        )

    def _reconcile(self, job: dict) -> None:
        """The Job controller's part we need: pod failure policy, backoff limit, replacement pods, completion."""
        if self._finished(job):
            return
        spec, status = job["spec"], job["status"]
        for pod in sorted(self._pods_of_job(job), key=lambda p: p["metadata"]["name"]):
            if pod["status"]["phase"] != "Failed" or pod.get("_counted"):
                continue
            pod["_counted"] = True
            index = int(pod["metadata"]["annotations"][INDEX_KEY])
            action = self._policy_action(job, pod)
            if action == "FailJob":
                code = self._container(pod)["state"]["terminated"]["exitCode"]
                self._finish_job(
                    job,
                    "Failed",
                    "PodFailurePolicy",
                    f"Container {CONTAINER} for pod {pod['metadata']['namespace']}/{pod['metadata']['name']} "
                    f"failed with exit code {code} matching FailJob rule at index 0",
                )
                return
            if action == "Count":
                status["failed"] = status.get("failed", 0) + 1
                if status["failed"] > spec.get("backoffLimit", 6):
                    self._finish_job(job, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
                    return
            self._create_pod(job, index)
        succeeded = {
            int(p["metadata"]["annotations"][INDEX_KEY])
            for p in self._pods_of_job(job)
            if p["status"]["phase"] == "Succeeded"
        }
        status["succeeded"] = len(succeeded)
        status["active"] = sum(1 for p in self._pods_of_job(job) if self._is_active(p))
        if len(succeeded) >= spec.get("completions", 1):
            self._finish_job(job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods")

    def _terminate(self, pod: dict, exit_code: int, reason: str | None, message: str | None) -> None:
        container = self._container(pod)
        started = (container["state"].get("running") or {}).get("startedAt", rfc3339())
        terminated: dict[str, Any] = {"exitCode": exit_code, "startedAt": started, "finishedAt": rfc3339()}
        if reason:
            terminated["reason"] = reason
        if message:
            terminated["message"] = message
        container["state"] = {"terminated": terminated}
        container["ready"] = False
        pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"

    def _changed(self, pod: dict) -> None:
        self._rv += 1
        pod["metadata"]["resourceVersion"] = str(self._rv)
        job = self._job_of(pod)
        if job is not None:
            self._reconcile(job)
        self.cond.notify_all()

    # ---- driving the cluster from tests ---------------------------------------------------------------
    def job(self, name: str) -> dict:
        with self.cond:
            return json.loads(json.dumps(self._find_job(name)))

    def pod_names(self, job_name: str, active_only: bool = False) -> list[str]:
        """Pods of a job, ordered by index then creation."""
        with self.cond:
            pods = [
                p
                for p in self.pods.values()
                if p["metadata"]["labels"].get("job-name") == job_name and (not active_only or self._is_active(p))
            ]
            pods.sort(key=lambda p: (int(p["metadata"]["annotations"][INDEX_KEY]), p["metadata"]["name"]))
            return [p["metadata"]["name"] for p in pods]

    def pod(self, name: str) -> dict:
        with self.cond:
            return json.loads(json.dumps(self._find_pod(name)))

    def set_running(self, name: str, image_id: str = "sha256:fake") -> None:
        with self.cond:
            pod = self._find_pod(name)
            pod["status"]["phase"] = "Running"
            container = self._container(pod)
            container.update(ready=True, started=True, imageID=image_id)
            container["state"] = {"running": {"startedAt": rfc3339()}}
            self._changed(pod)

    def log(self, name: str, *lines: str) -> None:
        with self.cond:
            pod = self._find_pod(name)
            key = (pod["metadata"]["namespace"], name)
            self.logs[key].extend(LogLine(self._now_ns(), line) for line in lines)
            self.cond.notify_all()

    def terminate(
        self,
        name: str,
        exit_code: int,
        reason: str | None = None,
        message: str | None = None,
        last_lines: tuple[str, ...] = (),
    ) -> None:
        """The container exits; `last_lines` are written at the very end and miss any open follow stream."""
        with self.cond:
            pod = self._find_pod(name)
            key = (pod["metadata"]["namespace"], name)
            self.logs[key].extend(LogLine(self._now_ns(), line, follow_visible=False) for line in last_lines)
            self._terminate(pod, exit_code, reason or ("Completed" if exit_code == 0 else "Error"), message)
            self._changed(pod)

    def set_waiting(self, name: str, reason: str, message: str = "") -> None:
        with self.cond:
            pod = self._find_pod(name)
            container = self._container(pod)
            container["state"] = {"waiting": {"reason": reason, "message": message}}
            self._changed(pod)

    def set_unschedulable(self, name: str, message: str) -> None:
        with self.cond:
            pod = self._find_pod(name)
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ]
            self._changed(pod)

    def evict(self, name: str, reason: str = "TerminationByKubelet", by_kubelet: bool = True) -> None:
        """Node-pressure eviction (kubelet) or preemption/API eviction: DisruptionTarget, then Failed."""
        with self.cond:
            pod = self._find_pod(name)
            pod["status"]["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": "The node was low on resource: memory." if by_kubelet else "Preempted by scheduler",
                }
            )
            if by_kubelet:
                pod["status"]["reason"] = "Evicted"
                pod["status"]["message"] = "The node was low on resource: memory."
            self._terminate(pod, 137, "Error", None)
            self._changed(pod)

    def expire_deadline(self, job_name: str) -> None:
        with self.cond:
            job = self._find_job(job_name)
            self._finish_job(job, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
            self.cond.notify_all()

    def count(self, method: str, pattern: str) -> int:
        return sum(1 for m, path in self.requests if m == method and re.search(pattern, path))

    # ---- the REST API ---------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        routes = [
            (r"^/apis/batch/v1/namespaces/([^/]+)/jobs$", self._jobs),
            (r"^/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)(?:/status)?$", self._job),
            (r"^/api/v1/namespaces/([^/]+)/services$", self._services),
            (r"^/api/v1/namespaces/([^/]+)/services/([^/]+)$", self._service),
            (r"^/api/v1/namespaces/([^/]+)/pods$", self._pods),
            (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$", self._pod),
            # No controller here emits events: the list is empty (the real cluster's are tested in
            # tests/integration/test_kubernetes_local_cluster.py).
            (r"^/api/v1/namespaces/([^/]+)/events$", lambda method, ns, **_: (200, self._list("EventList", []))),
        ]
        for pattern, route in routes:
            match = re.match(pattern, path)
            if match:
                with self.cond:
                    return route(method, *match.groups(), query=query, body=body)
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")

    def _list(self, kind: str, items: list[dict]) -> dict:
        return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _jobs(self, method, ns, *, query, body):
        if method == "GET":
            selector = query.get("labelSelector")
            items = [
                j
                for (n, _), j in self.jobs.items()
                if n == ns and _selector_matches(selector, j["metadata"].get("labels", {}))
            ]
            return 200, self._list("JobList", items)
        if method == "POST":
            name = body["metadata"]["name"]
            if (ns, name) in self.jobs:
                raise ApiError(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            job = json.loads(json.dumps(body))
            self._meta(job, ns)
            job["status"] = {"active": 0, "startTime": rfc3339()}
            self.jobs[(ns, name)] = job
            for index in range(job["spec"].get("completions", 1)):
                self._create_pod(job, index)
            job["status"]["active"] = job["spec"].get("completions", 1)
            self.cond.notify_all()
            return 201, job
        raise ApiError(405, "MethodNotAllowed", method)

    def _delete_options(self, query, body) -> str | None:
        return query.get("propagationPolicy") or (body or {}).get("propagationPolicy")

    def _job(self, method, ns, name, *, query, body):
        job = self.jobs.get((ns, name))
        if job is None:
            raise ApiError(404, "NotFound", f'jobs.batch "{name}" not found')
        if method == "GET":
            return 200, job
        if method == "DELETE":
            policy = self._delete_options(query, body)
            self.deletions.append(("Job", name, policy))
            del self.jobs[(ns, name)]
            if policy != "Orphan":
                uid = job["metadata"]["uid"]
                for store in (self.pods, self.services):
                    owned = [
                        key
                        for key, obj in store.items()
                        if any(r["uid"] == uid for r in obj["metadata"].get("ownerReferences", []))
                    ]
                    for key in owned:
                        del store[key]
            self.cond.notify_all()
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        if method == "PATCH":  # a merge patch of annotations (its log cursors) or of owner references (a Job's)
            if "ownerReferences" in ((body or {}).get("metadata") or {}):
                job["metadata"]["ownerReferences"] = body["metadata"]["ownerReferences"]
            for key, value in ((body or {}).get("metadata") or {}).get("annotations", {}).items():
                annotations = job["metadata"].setdefault("annotations", {})
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            return 200, job
        raise ApiError(405, "MethodNotAllowed", method)

    def _services(self, method, ns, *, query, body):
        if method == "GET":
            return 200, self._list("ServiceList", [s for (n, _), s in self.services.items() if n == ns])
        if method == "POST":
            name = body["metadata"]["name"]
            if (ns, name) in self.services:
                raise ApiError(409, "AlreadyExists", f'services "{name}" already exists')
            service = json.loads(json.dumps(body))
            self._meta(service, ns)
            self.services[(ns, name)] = service
            return 201, service
        raise ApiError(405, "MethodNotAllowed", method)

    def _service(self, method, ns, name, *, query, body):
        service = self.services.get((ns, name))
        if service is None:
            raise ApiError(404, "NotFound", f'services "{name}" not found')
        if method == "GET":
            return 200, service
        if method == "DELETE":
            self.deletions.append(("Service", name, self._delete_options(query, body)))
            del self.services[(ns, name)]
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        raise ApiError(405, "MethodNotAllowed", method)

    def _pods(self, method, ns, *, query, body):
        selected = [
            p
            for (n, _), p in self.pods.items()
            if n == ns and _selector_matches(query.get("labelSelector"), p["metadata"].get("labels", {}))
            # the one field selector the platform sends: metadata.name=<pod>
            and query.get("fieldSelector", "metadata.name=" + p["metadata"]["name"]) == "metadata.name=" +
            p["metadata"]["name"]
        ]
        if method == "GET":
            return 200, self._list("PodList", [_public(p) for p in selected])
        if method == "DELETE":
            for pod in selected:
                self.deletions.append(("Pod", pod["metadata"]["name"], self._delete_options(query, body)))
                del self.pods[(ns, pod["metadata"]["name"])]
            self.cond.notify_all()
            return 200, self._list("PodList", [_public(p) for p in selected])
        raise ApiError(405, "MethodNotAllowed", method)

    def _pod(self, method, ns, name, *, query, body):
        pod = self.pods.get((ns, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        if method == "GET":
            return 200, _public(pod)
        if method == "DELETE":
            self.deletions.append(("Pod", name, self._delete_options(query, body)))
            del self.pods[(ns, name)]
            self.cond.notify_all()
            return 200, _public(pod)
        raise ApiError(405, "MethodNotAllowed", method)

    def log_lines(self, ns: str, name: str, query: dict[str, str], start: int = 0) -> tuple[list[LogLine], bool]:
        """Lines from `start` on (since-filtered) and whether the container is done writing (call under cond)."""
        pod = self.pods.get((ns, name))
        if pod is None:
            return [], True
        lines = self.logs.get((ns, name), [])[start:]
        if query.get("sinceSeconds"):
            cutoff = time.time_ns() - int(query["sinceSeconds"]) * 1_000_000_000
            lines = [line for line in lines if line.ts_ns >= cutoff]
        done = "terminated" in self._container(pod)["state"] or self.stopping
        return lines, done


def _public(pod: dict) -> dict:
    return {k: v for k, v in pod.items() if not k.startswith("_")}


def _handler_for(api: FakeKubeApi):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

        def _send_json(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _dispatch(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            api.requests.append((method, parts.path))
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null") if length else None
            try:
                match = re.match(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$", parts.path)
                if match and method == "GET":
                    self._log(match.group(1), match.group(2), query)
                    return
                code, payload = api.handle(method, parts.path, query, body)
            except ApiError as err:
                code, payload = err.code, err.body()
            self._send_json(code, payload)

        def _format(self, line: LogLine, timestamps: bool) -> bytes:
            prefix = f"{rfc3339nano(line.ts_ns)} " if timestamps else ""
            return f"{prefix}{line.text}\n".encode()

        def _log(self, ns: str, name: str, query: dict[str, str]) -> None:
            timestamps = _go_bool(query.get("timestamps"))
            with api.cond:
                pod = api.pods.get((ns, name))
                if pod is None:
                    raise_error = ApiError(404, "NotFound", f'pods "{name}" not found')
                else:
                    state = api._container(pod)["state"]
                    raise_error = None
                    if "waiting" in state:
                        raise_error = ApiError(
                            400,
                            "BadRequest",
                            f'container "{CONTAINER}" in pod "{name}" is waiting to start: {state["waiting"]["reason"]}',
                        )
                if raise_error:
                    self._send_json(raise_error.code, raise_error.body())
                    return
                lines, done = api.log_lines(ns, name, query)
            if not _go_bool(query.get("follow")):
                data = b"".join(self._format(line, timestamps) for line in lines)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            # Follow: stream as lines come, close when the container has terminated (no Content-Length:
            # the body ends when the connection closes, as with HTTP/1.0).
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            position = 0
            with api.cond:
                position = len(api.logs.get((ns, name), [])) - len(lines)
            try:
                while True:
                    with api.cond:
                        fresh, done = api.log_lines(ns, name, {}, position)
                        visible = []
                        for line in fresh:
                            if not line.follow_visible:
                                break
                            visible.append(line)
                        position += len(visible)
                        if not visible and not done:
                            api.cond.wait(0.2)
                            continue
                    if visible:
                        self.wfile.write(b"".join(self._format(line, timestamps) for line in visible))
                        self.wfile.flush()
                    if done:  # lines written in the container's last moment never reach this stream
                        return
            except (BrokenPipeError, ConnectionResetError):
                return

        def do_GET(self):
            self._dispatch("GET")

        def do_POST(self):
            self._dispatch("POST")

        def do_DELETE(self):
            self._dispatch("DELETE")

        def do_PATCH(self):
            self._dispatch("PATCH")

    return Handler

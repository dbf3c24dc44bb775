"""The SDK's endpoints on the Airflow API server (a FastAPI app mounted at /training-sdk), for what the REST API lacks:

  PUT /training-sdk/code/<sha256>.tar.gz?dag_id=D   a packed source_dir (the request body) into the caller's own part of
                                                    the workspace's staging area,
                                                    `<workspace>/staging/code/<user>/<sha256>.tar.gz`; answers the path
                                                    to use as the job's source_dir. Code, not data: bodies larger than
                                                    [training] sdk_code_max_bytes (default 64 MiB) are refused (413),
                                                    and so is an upload that would take the caller's staged code over
                                                    [training] sdk_code_quota_bytes (default 512 MiB), concurrent
                                                    uploads of the same user included.
                                                    Content-addressed: the same code is stored once per user (uploading
                                                    it again refreshes its expiry); the body must hash to the name (a
                                                    truncated upload never becomes a source_dir).
  GET /training-sdk/code                            the caller's staged archives (name, sha256, bytes, uploaded_at,
                                                    expires_at, source_dir) and their quota use (used_bytes,
                                                    quota_bytes, expiry_days).
  DELETE /training-sdk/code/<sha256>.tar.gz         removes the caller's own archive of that name (404 if they have
                                                    none); never another user's.

An archive expires [training] sdk_code_expiry_days (default 30; 0 = never) after its last upload: the caller's expired
archives are removed when they upload or list, every user's by the workspace's garbage collection
(operators/state/retention.py).

PUT needs the caller's API token (the same bearer token as the REST API), an existing DAG D and the right to trigger it;
GET and DELETE need a logged-in user only: they act on the caller's own directory, named from the caller's identity,
never from the request. Every state-changing request passes the plugins' cross-site request forgery guard
(training_console/web_boundary.py: the SDK's bearer token satisfies it).
The first task accepts a staged source_dir only from the user who triggered the run (operators/staging/sdk_uploads.py).
/openapi.json and /docs need a logged-in user too. (Job metrics come from the training-jobs view's API,
plugins/training_console.)

The routes, their dependencies (who may call each) and the app: plugins/training_console/sdk_code_api.py; this module
is the plugin, which every task process loads, so it imports none of FastAPI.
"""

import functools

from airflow.plugins_manager import AirflowPlugin

import airflow_training_jobs  # noqa: F401 - one line if 'operators' is another package (see there)

URL_PREFIX = "/training-sdk"


@functools.cache
def create_app():
    # lazy: the routes' module imports FastAPI and Airflow's API security, which only the API server needs (below).
    from training_console.sdk_code_api import create_app as create_routes_app

    return create_routes_app()


class _FastAPIApps:
    """Built only where it is read (the API server): every task process loads the plugins too, and importing FastAPI
    and Airflow's API security module there would cost each task seconds."""

    def __get__(self, instance, owner):
        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "training-sdk"}]


class TrainingSdkApiPlugin(AirflowPlugin):
    name = "training_sdk_api"
    fastapi_apps = _FastAPIApps()

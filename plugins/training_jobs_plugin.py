"""Airflow plugin of the training-job platform: the training-jobs view (a FastAPI app for its data and page, shown
as a nav entry and as a tab on DAG runs), the extra links of the training stages (operators/stages/links.py), the API
server's check of the secrets a new run references (plugins/secret_reference_check.py) and its four-eyes check of a
retraining run's approval (plugins/approval_check.py)."""

from airflow.plugins_manager import AirflowPlugin

import airflow_training_jobs  # noqa: F401 - first: one line if 'operators' is another package (see there)
from approval_check import ApprovalCheck
from operators.console_urls import PLUGIN_PREFIX, RUN_VIEW_ROUTE
from operators.stages.links import ALL_LINKS
from secret_reference_check import SecretReferenceCheck


class _FastAPIApps:
    """The app is built only where it is read (the API server): every task process loads the plugins too, and
    importing FastAPI and Airflow's API security module there would cost each task seconds."""

    def __get__(self, instance, owner):
        # lazy: FastAPI and the console, only in the API server (see the docstring)
        from training_console.app import app

        return [{"app": app, "url_prefix": PLUGIN_PREFIX, "name": "Training jobs"}]


class TrainingJobsPlugin(AirflowPlugin):
    name = "training_jobs"
    operator_extra_links = [link() for link in ALL_LINKS]
    fastapi_apps = _FastAPIApps()
    fastapi_root_middlewares = [{"middleware": SecretReferenceCheck, "args": [], "kwargs": {},
                                 "name": "Secret references of new runs"},
                                {"middleware": ApprovalCheck, "args": [], "kwargs": {},
                                 "name": "Four eyes on retraining approvals"}]
    # One nav entry: a second one would make Airflow fold both into a "Plugins" menu. The compare page is reached
    # from the view's list ("Compare jobs"), in the same frame.
    external_views = [
        {"name": "Training jobs", "href": f"{PLUGIN_PREFIX}/ui/", "url_route": "training-jobs", "destination": "nav",
         "icon": f"{PLUGIN_PREFIX}/ui/icon.svg"},
        {"name": "Training jobs", "href": f"{PLUGIN_PREFIX}/ui/#/run/{{DAG_ID}}/{{RUN_ID}}",
         "url_route": RUN_VIEW_ROUTE, "destination": "dag_run"},
    ]

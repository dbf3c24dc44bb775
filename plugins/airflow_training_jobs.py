"""The platform's public entry for DAG files and the plugin: the DAG templates, after checking that the `operators`
package Python finds is the platform's.

    from airflow_training_jobs import training_job_dag

    dag = training_job_dag()

The distribution airflow-training-jobs installs its Airflow code as the top-level package `operators` (the checkout's
layout). Airflow appends the dags and plugins folders to sys.path, and teams often keep a package of that name there
or on PYTHONPATH: whichever comes first on sys.path wins. When it is not ours, importing this module fails with one
line naming the package found and what to do, instead of "No module named 'operators.pipelines'" somewhere below.
The provider's `apache_airflow_provider` entry point is this module's get_provider_info for the same reason: Airflow
loads it in every command, so a clash stops `airflow` with that line.
"""

import importlib
import importlib.util
import os

# Set by operators/__init__.py; a package of the same name that lacks it is someone else's.
_MARKER = "TRAINING_JOBS_PLATFORM"


def check_operators_package() -> None:
    """ImportError (one line) unless `import operators` gives the training-jobs platform's package."""
    spec = importlib.util.find_spec("operators")
    if spec is None:
        raise ImportError("the training-jobs platform's package 'operators' is not installed: "
                          "pip install airflow-training-jobs (docs/deploying.md)")
    # lazy: only once find_spec found a package of that name (else the line above)
    import operators

    if getattr(operators, _MARKER, None) is not True:
        where = getattr(operators, "__file__", None) or ", ".join(getattr(operators, "__path__", []) or ["?"])
        raise ImportError(
            f"the package 'operators' found at {os.path.dirname(where) if where.endswith('.py') else where} is not "
            "the training-jobs platform's (airflow-training-jobs installs its code as 'operators'): rename that "
            "package or take its folder off sys.path/PYTHONPATH (docs/deploying.md, 'The operators package')")


check_operators_package()

# Imported when asked for, not when the plugin (every task process) or Airflow's provider discovery checks.
_LAZY = {"training_job_dag": "operators.pipelines.dags", "hyperparameter_search_dag": "operators.pipelines.dags",
         "get_provider_info": "operators.provider_info"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The shipped DAGs as functions, so that a deployment's DAG file is three lines (docs/deploying.md):

    from airflow_training_jobs import training_job_dag

    dag = training_job_dag()

Each builds the same DAG as the checkout's dags/ file of that name; dag_id names another copy (its model asset is
`<dag_id>.model`).
"""

from __future__ import annotations

from airflow.sdk import DAG

from operators.pipelines.params import training_job_params
from operators.pipelines.template import model_asset_for, training_job_tasks
from operators.settings import training_settings

TRAINING_JOB_DOC = """training_job: one training job from a spec given in the trigger form, `--conf` or the REST API.

    airflow dags test training_job --conf '{"source_dir": "...", "entry_point": "train.py", "output_path": "..."}'
"""

HYPERPARAMETER_SEARCH_DOC = """hyperparameter_search: many training jobs (trials) over a search space, with early
stopping; the best model wins (docs/templates.md)."""


def training_job_dag(dag_id: str = "training_job", *, doc_md: str | None = None) -> DAG:
    """One training job per run, its spec from the trigger form, `--conf` or the REST API."""
    with DAG(
        dag_id=dag_id,
        schedule=None,
        catchup=False,
        max_active_runs=training_settings().max_active_runs,
        params=training_job_params(),
        tags=["training"],
        doc_md=doc_md or TRAINING_JOB_DOC,
    ) as dag:
        training_job_tasks(model_asset=model_asset_for(dag_id))
    return dag


def hyperparameter_search_dag(dag_id: str = "hyperparameter_search", *, doc_md: str | None = None) -> DAG:
    """Many trials over a search space ([training] search_pool / max_concurrent_trials bound them)."""
    # lazy: the search pipeline imports Airflow's task decorators (setup_teardown, the Python operator, packaging):
    # ~0.1 s of every training_job DAG file's parse, which builds no search
    from operators.pipelines.search import hyperparameter_search_tasks, search_params, trial_concurrency

    pool, max_concurrent_trials = trial_concurrency()
    with DAG(
        dag_id=dag_id,
        schedule=None,
        catchup=False,
        max_active_runs=2,
        params=search_params(),
        tags=["training", "search"],
        doc_md=doc_md or HYPERPARAMETER_SEARCH_DOC,
    ) as dag:
        hyperparameter_search_tasks(model_asset=model_asset_for(dag_id), pool=pool,
                                    max_concurrent_trials=max_concurrent_trials)
    return dag

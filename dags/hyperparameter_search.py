"""hyperparameter_search: many training jobs (trials) over a search space, with early stopping; the best model wins.

    airflow dags test hyperparameter_search --conf '{"source_dir": "...", "entry_point": "train.py",
        "output_path": "...", "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        "objective": "loss", "direction": "minimize", "strategy": "random", "max_trials": 8,
        "search_space": {"learning_rate": {"type": "log_uniform", "min": 0.01, "max": 1}, "epochs": [5, 10]}}'

See docs/templates.md and operators/pipelines/search.py.
"""

from airflow.sdk import DAG

from operators.pipelines.search import hyperparameter_search_tasks, search_params, trial_concurrency
from operators.pipelines.template import model_asset_for

pool, max_concurrent_trials = trial_concurrency()

with DAG(
    dag_id="hyperparameter_search",
    schedule=None,
    catchup=False,
    max_active_runs=2,
    params=search_params(),
    tags=["training", "search"],
    doc_md=__doc__,
) as dag:
    hyperparameter_search_tasks(model_asset=model_asset_for("hyperparameter_search"), pool=pool,
                                max_concurrent_trials=max_concurrent_trials)

"""training_job: one training job from a spec given in the trigger form, `--conf` or the REST API.

    airflow dags test training_job --conf '{"source_dir": "...", "entry_point": "train.py", "output_path": "..."}'
"""

from airflow.sdk import DAG

from operators.pipelines.params import training_job_params
from operators.settings import training_settings
from operators.pipelines.template import model_asset_for, training_job_tasks

with DAG(
    dag_id="training_job",
    schedule=None,
    catchup=False,
    max_active_runs=training_settings().max_active_runs,
    params=training_job_params(),
    tags=["training"],
    doc_md=__doc__,
) as dag:
    training_job_tasks(model_asset=model_asset_for("training_job"))

"""training_job: one training job from a spec given in the trigger form, `--conf` or the REST API.

    airflow dags test training_job --conf '{"source_dir": "...", "entry_point": "train.py", "output_path": "..."}'
"""

from airflow_training_jobs import training_job_dag

dag = training_job_dag(doc_md=__doc__)

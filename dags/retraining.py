"""Scheduled incremental retraining: one DAG per job config in dags/configs/*.yaml (see operators/pipelines/config_files.py).

Each run resumes from the promoted model, trains, and promotes the new model (the latest.json pointer and the
`<dag_id>.model` Asset event) only if it passes the config's metric gate. Another config directory:
airflow.cfg [training] retraining_configs. Parsing reads those files and nothing else.
"""

import os

from operators.pipelines.config_files import config_dir, load_job_configs
from operators.pipelines.retraining import retraining_dag

for _config in load_job_configs(config_dir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs"))):
    globals()[_config.dag_id] = retraining_dag(_config)

"""Airflow side of the training-job platform: job spec, hooks, triggers, stage operators, DAG template."""

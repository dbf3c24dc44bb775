"""Airflow side of the training-job platform, one package per concern (docs/architecture.md): jobspec/, pipelines/,
stages/, launch/ (one folder per backend), triggers/, storage/, cache/, staging/, state/, tracking/, tuning/, fs/.

The distribution airflow-training-jobs installs this package under the top-level name `operators`; a deployment's
own package of that name shadows it or is shadowed by it (sys.path order). plugins/airflow_training_jobs.py, which
DAG files and the plugin import first, checks the marker below and says so in one line."""

TRAINING_JOBS_PLATFORM = True

"""Airflow side of the training-job platform, one package per concern (docs/architecture.md): jobspec/, pipelines/,
stages/, launch/ (one folder per backend), triggers/, storage/, cache/, staging/, state/, tracking/, tuning/, fs/."""

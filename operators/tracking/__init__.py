"""Training metrics and MLflow tracking."""

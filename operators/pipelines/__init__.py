"""The DAG templates: one training job, hyperparameter search, scheduled retraining, and their trigger form and configs."""

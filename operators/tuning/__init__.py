"""Hyperparameter tuning: the search space and early stopping of trials."""

"""The job spec: the model, its parts and errors, and what is checked before anything is staged."""

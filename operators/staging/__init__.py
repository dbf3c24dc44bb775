"""Moving a job's code and checkpoints between their stores and its job root, and the SDK's upload area."""

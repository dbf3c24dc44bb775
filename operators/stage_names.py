"""The stages of a training job, in order: the task ids (after an optional task-group prefix) every template chains
(operators/pipelines/template.py) and every reader of a job's tasks walks (the console, its stop)."""

STAGES = ("validate_spec", "stage_code", "prefetch_data", "write_configs", "restore", "launch_training",
          "upload_artifacts", "publish_model")

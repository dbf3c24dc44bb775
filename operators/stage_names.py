"""The stages of a training job, in order, with the words the console shows for them: the task ids (after an optional
task-group prefix) every template chains (operators/pipelines/template.py) and every reader of a job's tasks walks (the
console, its stop). The console's pages get the labels from its API, never a list of their own."""

STAGE_LABELS = {"validate_spec": "validate", "stage_code": "stage code", "prefetch_data": "prefetch data",
                "write_configs": "write configs", "restore": "restore", "launch_training": "training",
                "upload_artifacts": "upload", "publish_model": "publish"}
STAGES = tuple(STAGE_LABELS)

# Each stage's task id, for the readers that pick one stage out (the console: its XComs, its state).
VALIDATE_SPEC, STAGE_CODE, PREFETCH_DATA, WRITE_CONFIGS, RESTORE, LAUNCH_TRAINING, UPLOAD_ARTIFACTS, PUBLISH_MODEL = STAGES

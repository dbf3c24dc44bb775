"""training_sdk: submit training jobs to an Airflow running the training_job DAG, in the PAI / SageMaker vocabulary.

    from training_sdk import Estimator
    est = Estimator(entry_point="train.py", source_dir="./src", hyperparameters={"epochs": 10})
    est.fit(inputs={"train": "s3://bucket/train/"})     # packs + uploads the code, triggers, streams the log
    print(est.model_data())

No Airflow import anywhere in this package: it speaks Airflow's REST API (see session.py).
"""

from training_sdk.errors import SpecValidationError, TrainingJobError, TrainingSdkError
from training_sdk.estimator import Estimator
from training_sdk.job import TrainingJob
from training_sdk.session import Session
from training_sdk.tuner import (
    CategoricalParameter,
    ContinuousParameter,
    HyperparameterTuner,
    IntegerParameter,
)

__all__ = [
    "CategoricalParameter",
    "ContinuousParameter",
    "Estimator",
    "HyperparameterTuner",
    "IntegerParameter",
    "Session",
    "SpecValidationError",
    "TrainingJob",
    "TrainingJobError",
    "TrainingSdkError",
]

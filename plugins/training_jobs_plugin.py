"""Airflow plugin of the training-job platform: registers the operators' extra link so the UI can show it."""

from airflow.plugins_manager import AirflowPlugin

from operators.links import ModelArtifactsLink


class TrainingJobsPlugin(AirflowPlugin):
    name = "training_jobs"
    operator_extra_links = [ModelArtifactsLink()]
